// Package proxy runs the per-GPU proxy loop: it drains the command FIFO a GPU kernel (or
// a host thread) fills — csrc/include/mkernel/fifo.h, gocore/fifo — into a transport,
// and publishes completions back.
//
// One Proxy owns one FIFO and drives one transport.Transport from one goroutine locked
// to an OS thread pinned to the placement's proxy CPUs (sched_setaffinity). Each step:
//
//  1. poll the transport for completions; finish commands, return their credits, record
//     their latency, advance the FIFO's done counter (in ticket order);
//  2. consume newly published commands in ticket order while the network has credit for
//     them (per-peer limits on commands and bytes in flight, and room in the table of
//     unfinished commands), translate them into transport ops (batched) and advance the
//     FIFO's tail — the producers' credit;
//  3. post the batch; whatever the transport does not take now is retried first next step.
//
// When a command lacks credit it stays in the FIFO: the FIFO fills and producers wait,
// so neither the ring nor the network is overrun. Fences and the signal of a
// WRITE_SIGNAL follow the transport's Caps: free on ordered transports, a wait for the
// peer's earlier commands to complete on reordering ones (EFA SRD).
//
// The loop allocates nothing and takes no locks: its state is preallocated at Start, the
// diagnostics it publishes (Stats: queue depth, in-flight per peer, a fixed-bucket
// latency histogram, the oldest unfinished command) are plain words written with atomic
// stores every tick and read lock-free from any goroutine. A watchdog in the same loop
// fails a command unfinished for longer than the op timeout, naming the peer, the ticket
// and the FIFO slot; a failed transport or producer fails the proxy too. A failure is
// written into the FIFO's error word so that producers (GPU spins) stop, and Done is
// closed; Err says why.
//
// What the loop cannot avoid is the Go runtime's stop-the-world pauses (tens of µs, caused
// by allocation elsewhere in the process): keep the process's allocation rate low and the
// GC's pacing loose (GOGC, GOMEMLIMIT) where the tail latency matters.
package proxy
