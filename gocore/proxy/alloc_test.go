package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/loopback"
	"github.com/mkernel/mkernel/gocore/transport/shm"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

// TestStepDoesNotAllocate drives the loop's step by hand (no goroutine) over a loopback
// pair: push a write-signal, step until it is done and has arrived. Zero allocations.
func TestStepDoesNotAllocate(t *testing.T) {
	j := transporttest.StartJob(t, func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return loopback.Open(ctx, cfg)
	}, transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	seg, err := shm.Create("fifo", fifo.Bytes(64))
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	ring, err := fifo.Init(seg.Bytes(), 64, fifo.ClockMonotonic)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProxy(ring, j.Ranks[0].T, Config{Rank: 0, World: 2, FlagBuf: transporttest.BufFlags})
	if err != nil {
		t.Fatal(err)
	}
	flag := j.Ranks[1].Flag(2)
	var seq uint64
	cmd := fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: 1, LocalBuf: uint32(transporttest.BufSrc), RemoteBuf: uint32(transporttest.BufData),
		Bytes: 512, ArrivalSlot: 2}
	var failed bool
	cycle := func() {
		seq++
		cmd.ArrivalSeq, cmd.EnqueueNS = seq, fifo.MonotonicNanos()
		ticket, err := ring.Push(&cmd, time.Second)
		if err != nil {
			failed = true
			return
		}
		for i := 0; ring.Done() <= ticket || *flag < seq; i++ {
			p.step()
			if i > 1000 {
				failed = true
				return
			}
		}
		p.steps++
		if p.steps%tickSteps == 0 {
			p.tick(fifo.MonotonicNanos())
		}
	}
	for range 100 {
		cycle()
	}
	allocs := testing.AllocsPerRun(2000, cycle)
	if failed || p.Err() != nil {
		t.Fatalf("the cycle failed: %v", p.Err())
	}
	if allocs != 0 {
		t.Fatalf("%.2f allocations per command (push + steps + ticks)", allocs)
	}
	p.tick(fifo.MonotonicNanos())
	if st := p.Stats(); st.Finished != seq || st.Latency.Count != seq {
		t.Errorf("stats: finished %d of %d, histogram %d", st.Finished, seq, st.Latency.Count)
	}
}
