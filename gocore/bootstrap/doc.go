// Package bootstrap brings the W ranks of an mkernel job together and all-gathers small
// opaque blobs among them (addresses, IPC handles, queue-pair numbers), like NCCL's
// bootstrap network. It is the first thing the control plane does and the only part that
// needs no prior agreement beyond one address and one secret.
//
// # Two ways in
//
// Under torchrun, rank 0 calls Listen, publishes ID().String() through the running
// torch.distributed store (as NCCL publishes its ncclUniqueId), and calls Accept; every
// other rank reads the string, ParseID's it and calls Join. Standalone (Go tests, C++),
// every rank calls New with a Config — usually ConfigFromEnv — naming the root's fixed
// address and the job secret.
//
// Both return a Session once all W ranks have joined. AllGather and Barrier are
// collectives: every rank calls them in the same order; AllGather returns every rank's
// blob in rank order. Rank 0 relays: each rank sends its blob to rank 0, which sends the
// gathered result to every rank. The root therefore sends W·Σ|blob| bytes per AllGather:
// 64 MiB for 256 ranks of 1 KiB, 1 GiB for 1024 ranks (about 2 s over loopback on a 2-core
// host), 16 GiB for 4096. That suits the handful of all-gathers of an initialization; bulk
// or frequent exchanges at thousands of ranks belong on a transport.
//
// # Failure model
//
// A session is all-or-nothing. Rank 0 sees every rank and decides: when a rank disconnects,
// closes, times out or calls mismatched collectives, rank 0 ends the session on every rank
// with one message naming the rank (and, for timeouts, every rank it was still waiting
// for): "timed out after 2s waiting for ranks [3 7] of 8 (joined 6)", "rank 5
// disconnected: connection closed". Done is closed and Err returns that error everywhere.
// Errors match ErrTimeout, ErrPeerGone, ErrAuth, ErrClosed, ErrTooLarge or ErrProtocol
// with errors.Is.
//
// Every wait is bounded: the rendezvous and each collective by the timeout (WithTimeout,
// default 5 min) and the caller's context; every read by a deadline, with heartbeats on idle
// connections, so a peer whose host vanished is found within the heartbeat timeout.
//
// # Security
//
// Each connection authenticates both ends with HMAC-SHA256 over fresh nonces from both
// sides and the rank's claim, keyed by the per-job secret; the secret never crosses the
// wire. The root rejects, logs and forgets connections with a wrong secret, world size,
// duplicate or out-of-range rank, foreign protocol or oversized frame, and keeps waiting for
// the real ranks. Traffic after the handshake is neither encrypted nor individually
// authenticated: the bootstrap keeps strangers out of a job, it does not defend against an
// attacker who can rewrite packets on the cluster network. ID.String contains the secret:
// do not log it.
package bootstrap
