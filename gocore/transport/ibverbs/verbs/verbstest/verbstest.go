// Package verbstest is the test support of the verbs backends (ibverbs,
// efa). It builds the fake rdma-core provider (testdata/fake_provider.c)
// that the verbs, ibverbs and efa tests load in place of libibverbs.so.1 and
// libefa.so.1 on machines without an RDMA device. The fake emulates devices
// and an RC/SRD fabric inside the test process; see the C file's header for
// what it models and what it does not. It also holds the tests both
// backends run: the suite on a real device (RunOnDevice), host memory
// standing in for GPU memory (GPUMemory), a write to a closed peer.
package verbstest

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

//go:embed testdata/fake_provider.c
var source []byte

// Build compiles the fake provider into a fresh shared library under
// t.TempDir and returns its path, for verbs.Load and Library.LoadEFA. Each
// call gives a separate library, so each test gets its own fabric. It skips
// the test when this build of package verbs has no rdma-core headers (the
// fake needs them too, and Load could not use it) or no C compiler is found.
func Build(t testing.TB) string {
	t.Helper()
	if v, _ := verbs.Built(); !v {
		t.Skip("package verbs was built without rdma-core headers (libibverbs-dev): the fake provider cannot be loaded")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		if out, err := exec.Command("go", "env", "CC").Output(); err == nil {
			cc = strings.TrimSpace(string(out))
		}
	}
	if cc == "" {
		cc = "cc"
	}
	fields := strings.Fields(cc)
	if _, err := exec.LookPath(fields[0]); err != nil {
		t.Skipf("no C compiler (%s) to build the fake provider: %v", cc, err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fake_provider.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libfakeverbs.so")
	args := append(fields[1:], "-shared", "-fPIC", "-O1", "-g", "-Wall", "-Werror", "-fvisibility=hidden",
		"-o", lib, src, "-lpthread")
	if out, err := exec.Command(fields[0], args...).CombinedOutput(); err != nil {
		t.Fatalf("build the fake provider: %v\n%s", err, out)
	}
	return lib
}
