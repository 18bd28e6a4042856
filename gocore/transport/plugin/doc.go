// Package plugin runs a transport backend in a separate process through
// hashicorp/go-plugin, selected with MKERNEL_NET_PLUGIN=/path/to/binary.
//
// The boundary carries control and data differently, as NCCL's net plugins do not
// (an RPC round trip is ~180 µs; a shared-memory ring ~0.5 µs):
//
//   - Control — init, register, address, connect, close, the failure message — goes over
//     go-plugin's net/rpc connection, versioned by Handshake (ProtocolVersion and a magic
//     cookie; a binary of another protocol version is refused before any call).
//   - Data never does. Open creates one memfd segment holding two single-producer rings:
//     submissions (transport.Op records, written by the host's Post) and completions
//     (written by the plugin's loop, read by the host's Poll), plus a failure word. The
//     plugin maps it, and maps every registered region by its file (Caps.NeedsFile), so
//     a write's payload moves from the host's memory to the wire inside the plugin with
//     no copy across the boundary.
//
// Host-side Post validates ops synchronously (the host knows every peer's region sizes:
// Address wraps the plugin's blob with them), so the Transport contract holds unchanged;
// the conformance suite runs against the tcp backend served this way.
//
// A plugin binary is three lines (cmd/mkernel-net-tcp is one):
//
//	func main() { plugin.Serve(tcp.Backend{}) }
//
// The plugin exits when its host does (it watches its parent), so it is never orphaned.
package plugin
