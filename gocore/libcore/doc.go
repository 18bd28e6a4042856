// Command libcore links libmkernel_core.so (go build -buildmode=c-shared):
// one Go runtime carrying both faces of the control plane.
//
//   - gocore/capi, the C ABI of csrc/include/mkernel/core_api.h (mk_get_api
//     and its versioned table), always;
//   - with -tags gopy (the Makefile's core target), the gopy-generated
//     wrappers of gocore/pyapi (zz_gopy_core.go, written here by the build),
//     the Python module mkernel._gocore.
//
// The dependency runs one way: pyapi uses capi (it hands the torch extension
// capi's table address, so both reach the same runtime); capi knows nothing
// of Python. This package only composes them.
package main
