//go:build !race

package datapath_test

const raceEnabled = false
