package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run every rank in its own OS process: the test binary re-executed with
// childEnv set, configured through the environment exactly as a standalone job is.

const victimEnv = "MKERNEL_BOOTSTRAP_TEST_VICTIM"

// childMain is a rank's whole life in a child process; its exit code is the verdict.
func childMain(mode string) int {
	cfg, err := ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", cfg.Rank, fmt.Sprintf(format, args...))
		return 1
	}
	ctx := context.Background()
	s, err := New(ctx, cfg)
	if err != nil {
		return fail("new: %v", err)
	}
	defer s.Close()
	switch mode {
	case "gather":
		for round := range 4 {
			res, err := s.AllGather(ctx, makeBlob(cfg.Rank, round))
			if err != nil {
				return fail("all-gather %d: %v", round, err)
			}
			if err := checkGather(res, cfg.World, round); err != nil {
				return fail("%v", err)
			}
		}
		if err := s.Barrier(ctx); err != nil {
			return fail("barrier: %v", err)
		}
		fmt.Println("ok")
		return 0
	case "die":
		victim, _ := strconv.Atoi(os.Getenv(victimEnv))
		res, err := s.AllGather(ctx, makeBlob(cfg.Rank, 0))
		if err != nil {
			return fail("all-gather: %v", err)
		}
		if err := checkGather(res, cfg.World, 0); err != nil {
			return fail("%v", err)
		}
		fmt.Println("gathered")
		if cfg.Rank == victim {
			time.Sleep(time.Minute) // killed meanwhile
			return fail("victim was not killed")
		}
		_, err = s.AllGather(ctx, makeBlob(cfg.Rank, 1))
		want := fmt.Sprintf("rank %d disconnected", victim)
		if !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), want) {
			return fail("second all-gather returned %v; want ErrPeerGone naming %q", err, want)
		}
		select {
		case <-s.Done():
		default:
			return fail("Done not closed")
		}
		fmt.Println("ok:", err)
		return 0
	}
	return fail("unknown child mode %q", mode)
}

type child struct {
	rank   int
	cmd    *exec.Cmd
	lines  chan string
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

// spawn starts world children in mode, with rank 0 listening on a free loopback port.
func spawn(t *testing.T, mode string, world int, extraEnv ...string) []*child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	secret := hex.EncodeToString(testSecret())
	addr := freeAddr(t)
	kids := make([]*child, world)
	for r := range world {
		c := &child{rank: r, lines: make(chan string, 64), done: make(chan struct{})}
		c.cmd = exec.Command(exe)
		c.cmd.Env = append(os.Environ(),
			childEnv+"="+mode,
			envRank+"="+strconv.Itoa(r),
			envWorld+"="+strconv.Itoa(world),
			envAddr+"="+addr,
			envSecret+"="+secret,
			envTimeout+"=30s",
		)
		c.cmd.Env = append(c.cmd.Env, extraEnv...)
		c.cmd.Stderr = &c.stderr
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start rank %d: %v", r, err)
		}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				c.lines <- sc.Text()
			}
			close(c.lines)
			c.err = c.cmd.Wait()
			close(c.done)
		}()
		kids[r] = c
	}
	t.Cleanup(func() {
		for _, c := range kids {
			c.cmd.Process.Kill()
			<-c.done
		}
	})
	return kids
}

// wait returns the child's exit error, killing it after d.
func (c *child) wait(t *testing.T, d time.Duration) error {
	select {
	case <-c.done:
	case <-time.After(d):
		c.cmd.Process.Kill()
		<-c.done
		t.Errorf("rank %d still running after %v; killed. stderr:\n%s", c.rank, d, c.stderr.String())
	}
	return c.err
}

func (c *child) waitLine(t *testing.T, want string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				<-c.done
				t.Fatalf("rank %d exited (%v) before printing %q. stderr:\n%s", c.rank, c.err, want, c.stderr.String())
			}
			if line == want {
				return
			}
		case <-timeout:
			t.Fatalf("rank %d did not print %q within %v", c.rank, want, d)
		}
	}
}

func TestMultiProcessAllGather(t *testing.T) {
	const world = 8
	start := time.Now()
	kids := spawn(t, "gather", world)
	for _, c := range kids {
		if err := c.wait(t, 45*time.Second); err != nil {
			t.Errorf("rank %d: %v. stderr:\n%s", c.rank, err, c.stderr.String())
		}
	}
	t.Logf("%d processes, 4 all-gathers and a barrier: %v", world, time.Since(start))
}

func TestMultiProcessKilledRank(t *testing.T) {
	const world, victim = 6, 3
	kids := spawn(t, "die", world, victimEnv+"="+strconv.Itoa(victim))
	for _, c := range kids {
		c.waitLine(t, "gathered", 45*time.Second)
	}
	if err := kids[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for _, c := range kids {
		err := c.wait(t, 20*time.Second)
		if c.rank == victim {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("victim: %v", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("rank %d: %v. stderr:\n%s", c.rank, err, c.stderr.String())
		}
	}
	if d := time.Since(killed); d > 10*time.Second {
		t.Errorf("survivors took %v to fail", d)
	}
}
