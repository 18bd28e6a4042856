// Package pyapi is the control plane as Python sees it: gopy generates the
// CPython bindings (module mkernel._core) from the exported functions of
// this package. It deals only in Python-friendly types (string, int, bool,
// error) and forwards to bootstrap, topology and logging.
package pyapi
