//go:build !gopy

package main

// main is required by -buildmode=c-shared; with -tags gopy the generated
// gopy file provides it instead.
func main() {}
