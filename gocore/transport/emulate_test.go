package transport

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseLinkShape(t *testing.T) {
	for _, c := range []struct {
		v    string
		ok   bool
		want LinkShape
		bad  bool
	}{
		{v: ""},
		{v: "50GB/s,3us", ok: true, want: LinkShape{BytesPerSecond: 50e9, Latency: 3 * time.Microsecond}},
		{v: " 400Gb/s , 2us ", ok: true, want: LinkShape{BytesPerSecond: 50e9, Latency: 2 * time.Microsecond}},
		{v: "12.5GB/s", ok: true, want: LinkShape{BytesPerSecond: 12.5e9}},
		{v: "800MB/s,1ms", ok: true, want: LinkShape{BytesPerSecond: 800e6, Latency: time.Millisecond}},
		{v: "100Mb/s,0", ok: true, want: LinkShape{BytesPerSecond: 12.5e6}},
		{v: "inf,5us", ok: true, want: LinkShape{Latency: 5 * time.Microsecond}},
		{v: "1kB/s", ok: true, want: LinkShape{BytesPerSecond: 1e3}},
		{v: "50", bad: true},
		{v: "50GB", bad: true},
		{v: "-1GB/s", bad: true},
		{v: "GB/s", bad: true},
		{v: "50GB/s,soon", bad: true},
		{v: "50GB/s,-1us", bad: true},
	} {
		s, ok, err := ParseLinkShape(c.v)
		if c.bad {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvNetEmulate) {
				t.Errorf("%q: err %v, want ErrInvalid naming %s", c.v, err, EnvNetEmulate)
			}
			continue
		}
		if err != nil || ok != c.ok || s != c.want {
			t.Errorf("%q: got %+v %v %v, want %+v %v", c.v, s, ok, err, c.want, c.ok)
		}
	}
}

func TestLinkShapeSerialize(t *testing.T) {
	s := LinkShape{BytesPerSecond: 50e9}
	if got := s.SerializeNanos(1 << 20); got != 20972 { // 1 MiB at 50 GB/s: 20.97 us
		t.Fatalf("1 MiB at 50 GB/s: %d ns", got)
	}
	if (LinkShape{}).SerializeNanos(1<<20) != 0 || (LinkShape{}).Active() {
		t.Fatal("the zero shape limits something")
	}
}
