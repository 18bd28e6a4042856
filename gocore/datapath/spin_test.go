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
