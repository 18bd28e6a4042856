//go:build race

package datapath_test

// raceEnabled: the race detector slows every goroutine several-fold, so the pacing tests'
// upper bounds (what the host path may add) widen under it; their lower bounds (the link's
// rate) do not.
const raceEnabled = true
