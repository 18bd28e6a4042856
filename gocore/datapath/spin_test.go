package datapath

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/proxy"
	"github.com/mkernel/mkernel/gocore/transport"
)

func TestIdleSpin(t *testing.T) {
	t.Setenv(EnvProxySpin, "")
	if d, err := idleSpin(fifo.ClockGlobaltimer); d != GPUIdleSpin || err != nil {
		t.Fatalf("GPU producers: %v %v", d, err)
	}
	if d, err := idleSpin(fifo.ClockMonotonic); d != proxy.DefaultIdleSpin || err != nil {
		t.Fatalf("host producers: %v %v", d, err)
	}
	t.Setenv(EnvProxySpin, "-1ns")
	if d, err := idleSpin(fifo.ClockGlobaltimer); d != -time.Nanosecond || err != nil {
		t.Fatalf("override: %v %v", d, err)
	}
	t.Setenv(EnvProxySpin, "soon")
	if _, err := idleSpin(fifo.ClockMonotonic); !errors.Is(err, transport.ErrInvalid) || !strings.Contains(err.Error(), EnvProxySpin) {
		t.Fatalf("malformed: %v", err)
	}
}

func TestFIFOFormatEnv(t *testing.T) {
	for v, want := range map[string]fifo.Format{"": fifo.FormatLL, "0": fifo.FormatSeq, "1": fifo.FormatLL} {
		t.Setenv(EnvFIFOLL, v)
		if f, err := fifoFormat(fifo.FormatSeq); f != want || err != nil {
			t.Fatalf("%s=%q: %v %v", EnvFIFOLL, v, f, err)
		}
	}
	t.Setenv(EnvFIFOLL, "0")
	if f, err := fifoFormat(fifo.FormatLL); f != fifo.FormatLL || err != nil {
		t.Fatalf("an explicit Config.FIFOFormat must win: %v %v", f, err)
	}
	t.Setenv(EnvFIFOLL, "yes")
	if _, err := fifoFormat(fifo.FormatSeq); !errors.Is(err, transport.ErrInvalid) || !strings.Contains(err.Error(), EnvFIFOLL) {
		t.Fatalf("malformed: %v", err)
	}
}
