package transport

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	for _, c := range []struct {
		v    string
		ok   bool
		want Faults
		bad  bool
	}{
		{v: ""},
		{v: "7:200us", ok: true, want: Faults{Seed: 7, MaxDelay: 200 * time.Microsecond}},
		{v: " 3:1ms ", ok: true, want: Faults{Seed: 3, MaxDelay: time.Millisecond}},
		{v: "7", bad: true},
		{v: "x:1ms", bad: true},
		{v: "1:soon", bad: true},
		{v: "1:-1ms", bad: true},
	} {
		f, ok, err := parseFaults(c.v)
		if c.bad {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%q: err %v, want ErrInvalid", c.v, err)
			}
			continue
		}
		if err != nil || ok != c.ok || f != c.want {
			t.Errorf("%q: got %+v %v %v, want %+v %v", c.v, f, ok, err, c.want, c.ok)
		}
	}
}

func TestFaultsFromEnvOnlyInTestBuilds(t *testing.T) {
	t.Setenv(EnvNetFaults, "")
	if _, ok, err := FaultsFromEnv(); ok || err != nil {
		t.Fatalf("unset: ok %v err %v", ok, err)
	}
	t.Setenv(EnvNetFaults, "7:200us")
	f, ok, err := FaultsFromEnv()
	if FaultInjectionBuilt {
		if err != nil || !ok || f != (Faults{Seed: 7, MaxDelay: 200 * time.Microsecond}) {
			t.Fatalf("test build: got %+v %v %v", f, ok, err)
		}
		return
	}
	if ok || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "mkernel_faults") {
		t.Fatalf("production build must refuse, naming the tag: ok %v err %v", ok, err)
	}
}
