package main

// The pyshim include path is for the gopy-generated file (zz_gopy_core.go,
// built with -tags gopy), whose preamble includes <Python.h>.

/*
#cgo CFLAGS: -I${SRCDIR}/pyshim
*/
import "C"

import (
	// The C ABI: its //export functions and the mk_api_v1 table (mk_get_api)
	// are linked into this library whether or not the gopy bindings are.
	_ "github.com/mkernel/mkernel/gocore/capi"
)
