//go:build cgo && mkernel_nordma

package verbs

// Building with -tags mkernel_nordma compiles shim.c as if rdma-core's
// headers were absent, even where they are installed: the build CI uses to
// prove that the package (and everything importing it) builds and passes its
// tests on machines without libibverbs-dev. cgo flags apply to every C file
// of the package.

// #cgo CPPFLAGS: -DMK_NO_RDMA_HEADERS
import "C"
