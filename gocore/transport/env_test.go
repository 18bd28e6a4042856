package transport

import (
	"errors"
	"testing"
	"time"
)

func TestFaultsFromEnv(t *testing.T) {
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
		t.Setenv(EnvNetFaults, c.v)
		f, ok, err := FaultsFromEnv()
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
