package loopback

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/mkernel/mkernel/gocore/transport"
)

// Parallel copies. One thread copies host memory at ~10 GB/s, below a NIC (50 GB/s for
// 400 Gb/s) and below what the GPU writes into host staging, so a large op is cut into
// pieces that a few worker goroutines and the proxy thread copy together, and the copies of
// consecutive ops overlap unless their destinations do (progress): placement stays in order.
const (
	// ParallelCopyMin is the smallest op copied in pieces.
	ParallelCopyMin = 512 << 10
	// CopyPiece is the size of one piece.
	CopyPiece = 256 << 10
	// maxPieces bounds the pieces of one op queued for the workers (an op of more pieces
	// is copied by the proxy thread in the remainder: sends never block).
	maxPieces = 1024
	// EnvCopyThreads overrides DefaultCopyWorkers ("0": no workers).
	EnvCopyThreads = "MKERNEL_NET_COPY_THREADS"
)

// DefaultCopyWorkers is the number of copy workers per endpoint: a quarter of the CPUs this
// process may use, at most 4 (one box runs one endpoint per rank, each with its proxy thread).
func DefaultCopyWorkers() int { return min(4, runtime.GOMAXPROCS(0)/4) }

func copyWorkersFromEnv() (int, error) {
	v := strings.TrimSpace(os.Getenv(EnvCopyThreads))
	if v == "" {
		return DefaultCopyWorkers(), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 64 {
		return 0, fmt.Errorf("%w: %s=%q: want a number of threads 0..64", transport.ErrInvalid, EnvCopyThreads, v)
	}
	return n, nil
}

// piece is one part of a parallel copy; left counts the op's pieces not yet copied.
type piece struct {
	dst, src []byte
	left     *atomic.Int32
}

func (pc piece) run() {
	copy(pc.dst, pc.src)
	pc.left.Add(-1) // publishes the bytes to whoever loads left (the placing thread)
}

// split queues e's pieces for the workers (the caller keeps the queue at most half full);
// pieces the queue cannot take are copied here.
func (t *Transport) split(e *shaped) {
	n := len(e.src)
	step := t.o.pieceBytes
	e.left.Store(int32((n + step - 1) / step))
	for off := 0; off < n; off += step {
		end := min(n, off+step)
		pc := piece{dst: e.dst[off:end], src: e.src[off:end], left: &e.left}
		select {
		case t.work <- pc:
		default:
			pc.run()
		}
	}
}

// copyWorker runs pieces until the transport closes.
func (t *Transport) copyWorker() {
	defer t.workers.Done()
	for {
		select {
		case pc := <-t.work:
			pc.run()
		case <-t.stopWork:
			return
		}
	}
}
