// Package tcp is the transport backend that runs on any host: one TCP connection per pair
// of ranks carries one-sided writes as frames, applied by the receiver straight into the
// registered destination, in order.
//
// # Data path
//
// Post appends ops to the peer's ring (preallocated) and wakes that peer's writer
// goroutine, which sends every pending op in one writev: a 48-byte header per op and the
// payload straight from the registered source memory, no copy. The peer's reader goroutine
// reads the header, checks the destination against its own regions, reads the payload
// straight into it, then stores the signal (atomic max), and acknowledges: acks are
// cumulative and coalesced, carried by the reverse direction's writer. An op completes
// when acknowledged, so a completion means the data and signal are placed at the peer
// (and Caps.OrderedWrites holds too: one stream, applied in order). No allocation happens
// on either side in steady state.
//
// # Connections and security
//
// The listener binds one address, Config.BindHost (an IP or an interface name; default the
// local address of the route to Config.RouteTo, else 127.0.0.1) — never every interface —
// and is closed once every peer is connected. The lower rank dials. Both ends prove they
// hold the job key (Config.Key, e.g. bootstrap.Session.DeriveKey) with HMAC-SHA256 over
// fresh nonces from both sides and the ranks' claims; the key never crosses the wire.
// Connections with another magic, version, world, an unexpected or duplicate rank or a
// wrong MAC are logged and dropped, and Connect keeps waiting for the real peer until its
// timeout. After the handshake frames are checked (kind, buffer, range) but neither
// encrypted nor individually authenticated, as with the bootstrap.
//
// # Failure
//
// A peer that closes cleanly says goodbye: later ops to it fail with ErrPeerGone. A peer
// that vanishes (EOF or reset without goodbye, TCP keep-alive expiry) or stops reading
// (a write blocked past Config.Timeout) fails the transport with ErrPeerGone or ErrTimeout
// naming its rank.
//
// WithFaults (tests only) delays frames and applies them in random order at the receiver,
// like EFA SRD; Caps.OrderedWrites is then false and results must still be exact.
// Backend.Open turns it on when MKERNEL_NET_FAULTS=SEED:MAXDELAY is set (transport.EnvNetFaults)
// in a test build (-tags mkernel_faults); a production build refuses the variable.
package tcp
