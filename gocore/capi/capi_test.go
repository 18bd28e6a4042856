package capi

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// buildABI builds libmkernel_core.so and the C test program once per test run.
func buildABI(t *testing.T) (lib, prog string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler: cannot test the C ABI from C")
	}
	dir := t.TempDir()
	lib = filepath.Join(dir, "libmkernel_core.so")
	// The library as shipped (gocore/libcore links this package), without the gopy bindings.
	build := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, "../libcore")
	build.Env = os.Environ()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	prog = filepath.Join(dir, "abi_test")
	// The program sees only the hand-written header, as a C caller does. The
	// //export prototypes are checked against core_api.h where the table is
	// built (table.c includes both and treats a mismatch as an error); the
	// library's own cgo header declares only gocore/libcore's exports.
	cmd := exec.Command(cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Werror", "-I../../csrc/include",
		"-include", "mkernel/core_api.h", "-o", prog, "testdata/abi_test.c", "-ldl")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compile abi_test.c: %v\n%s", err, out)
	}
	return lib, prog
}

func TestCABIFromC(t *testing.T) {
	lib, prog := buildABI(t)
	sysfs, _ := filepath.Abs("../topology/testdata/sysfs/dgx-h200")

	t.Run("single", func(t *testing.T) {
		out, err := exec.Command(prog, lib, sysfs).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS") {
			t.Fatalf("abi_test: %v\n%s", err, out)
		}
	})

	for _, world := range []int{2, 4} {
		t.Run("world"+strconv.Itoa(world), func(t *testing.T) {
			root := exec.Command(prog, lib, sysfs, "0", strconv.Itoa(world))
			stdout, err := root.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var rootErr strings.Builder
			root.Stderr = &rootErr
			if err := root.Start(); err != nil {
				t.Fatal(err)
			}
			defer root.Process.Kill()
			sc := bufio.NewScanner(stdout)
			if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ID ") {
				t.Fatalf("rank 0 printed no id: %q %s", sc.Text(), rootErr.String())
			}
			id := strings.TrimPrefix(sc.Text(), "ID ")
			peers := make([]*exec.Cmd, 0, world-1)
			outs := make([]*strings.Builder, 0, world-1)
			for r := 1; r < world; r++ {
				c := exec.Command(prog, lib, sysfs, strconv.Itoa(r), strconv.Itoa(world), id)
				var b strings.Builder
				c.Stdout, c.Stderr = &b, &b
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				defer c.Process.Kill()
				peers, outs = append(peers, c), append(outs, &b)
			}
			done := make(chan error, 1)
			go func() {
				for sc.Scan() {
				}
				done <- root.Wait()
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("rank 0: %v\n%s", err, rootErr.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatal("rank 0 did not finish in 60 s")
			}
			for i, c := range peers {
				if err := c.Wait(); err != nil || !strings.Contains(outs[i].String(), "PASS") {
					t.Fatalf("rank %d: %v\n%s", i+1, err, outs[i].String())
				}
			}
		})
	}
}
