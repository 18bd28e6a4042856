// Package nvml is the small part of the NVIDIA Management Library that
// mkernel uses: initialization, GPU handles by index or PCI bus ID, PCI
// info, NVLink state and remote ends, and NVLink P2P status.
//
// [Library] opens libnvidia-ml.so.1 with dlopen(RTLD_NOW|RTLD_LOCAL) in the
// first [Library.Init] and resolves every entry point it needs with dlsym
// right then, calling them through function pointers. No NVML symbol is
// ever left for the dynamic linker to resolve, so binaries and c-shared
// libraries that import this package load with RTLD_NOW on hosts without
// the NVIDIA driver; there Init returns an error matching
// [ErrLibraryNotFound] (no library) or [ErrFunctionNotFound] (a driver too
// old to have one of the entry points). Builds without cgo get a Library
// whose Init always reports ErrLibraryNotFound.
//
// Init and Shutdown are reference counted like nvmlInit/nvmlShutdown: every
// successful Init needs one Shutdown, and the library is closed again by the
// last one. Failures are errors, not return codes: NVML's status codes are
// [Return] values, and a failed call is a [*CallError] naming the function,
// so callers test them with errors.Is(err, nvml.ErrNotFound).
//
// [Interface] and [Device] are what callers should hold, so that tests can
// substitute a hand-written fake machine.
package nvml
