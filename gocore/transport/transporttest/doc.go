// Package transporttest is the conformance suite every transport backend runs: one
// function, Run, that opens a job of in-process ranks through the backend's Open and
// checks the Transport contract — exact data for ragged sizes and offsets, signals never
// ahead of their data, monotonic flags, completions, back-pressure, invalid arguments,
// malformed connection blobs, a peer going away, zero allocations on the data path.
//
// A backend's test is three lines:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Suite{Open: mybackend.Open})
//	}
//
// The package also holds the helpers backend tests share: an in-process Exchanger
// (LocalGroup), a job of connected ranks (StartJob), a per-rank driver goroutine that owns
// a transport's data path (Driver) and flag waits.
package transporttest
