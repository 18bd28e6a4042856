//go:build gopy

package main

// The gopy-generated wrappers (zz_gopy_core.go, written by `make core`, not
// checked in) import gopy's handle package: named here too, so that go.mod
// lists gopy as the direct requirement it is in a checkout without them.
import _ "github.com/go-python/gopy/gopyh"
