package capi

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/mkernel/mkernel/gocore/bootstrap"
)

// Status numbers are part of the ABI (core_api.h); the test names them
// literally so a renumbering fails here.
const (
	stOK       = 0
	stInvalid  = 1
	stTimeout  = 2
	stRemote   = 3
	stAuth     = 4
	stSystem   = 6
	stSmall    = 7
	stClosed   = 8
	stInternal = 9
)

// lastError reads the message guard stored. guard and the read must run on
// one OS thread: the message is per thread.
func lastError() string { return getLastErrorForTest() }

func TestGuardRecoversPanics(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := guard("test_call", func() error { panic("boom") })
	if int(st) != stInternal {
		t.Fatalf("panic gave status %d, want MK_ERR_INTERNAL (%d)", st, stInternal)
	}
	if msg := lastError(); !strings.Contains(msg, "test_call") || !strings.Contains(msg, "boom") {
		t.Fatalf("last error %q should name the call and the panic", msg)
	}
	var nilMap map[string]int
	st = guard("nil_write", func() error { nilMap["x"] = 1; return nil })
	if int(st) != stInternal {
		t.Fatalf("runtime panic gave status %d", st)
	}
}

func TestStatusMapping(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, stOK},
		{invalid("x"), stInvalid},
		{fmt.Errorf("wrap: %w", bootstrap.ErrTimeout), stTimeout},
		{fmt.Errorf("wrap: %w", bootstrap.ErrPeerGone), stRemote},
		{fmt.Errorf("wrap: %w", bootstrap.ErrAuth), stAuth},
		{fmt.Errorf("wrap: %w", errBufferTooSmall), stSmall},
		{fmt.Errorf("wrap: %w", errClosed), stClosed},
		{errors.New("disk on fire"), stSystem},
	} {
		if got := int(statusOf(tc.err)); got != tc.want {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if st := guard("ok_call", func() error { return nil }); int(st) != stOK || lastError() != "" {
		t.Fatalf("success: status %d, last error %q", st, lastError())
	}
}
