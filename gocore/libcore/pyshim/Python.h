/*
 * A CPython-version-independent stand-in for <Python.h>, used only to compile
 * the cgo preamble that gopy generates into libmkernel_core (zz_gopy_*.go).
 *
 * Why: the gopy-generated Go file includes <Python.h> and calls a handful of
 * CPython functions (GIL save/restore, error setting, bytes and number
 * conversion). Compiling it against one interpreter's real headers would tie
 * the whole Go library to that CPython minor version (3.11 in CI, 3.12 on the
 * GPU machine). Every function declared here is part of CPython's stable ABI
 * (PEP 384) with an unchanged signature since 3.2, so the library built once
 * runs under any CPython >= 3.8. Symbols are weak: outside a Python process
 * (a C program using the C ABI) they stay unresolved and are never called.
 * The CPython extension part of the gopy module (pybindgen's C file) is
 * compiled per interpreter by the package build, against real headers.
 */
#ifndef MKERNEL_PYSHIM_PYTHON_H_
#define MKERNEL_PYSHIM_PYTHON_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#define MK_PYWEAK __attribute__((weak))

typedef struct _object PyObject; /* opaque: never dereferenced here */
typedef struct _ts PyThreadState;
typedef ptrdiff_t Py_ssize_t;
typedef enum { PyGILState_LOCKED, PyGILState_UNLOCKED } PyGILState_STATE;
typedef struct { double real; double imag; } Py_complex;

/* Exception objects are data symbols: a plain (or cgo-generated) reference
 * would need them at load time, so they are read through a weak alias. */
MK_PYWEAK extern PyObject* PyExc_RuntimeError;
static inline PyObject* mk_pyshim_runtime_error(void) {
  return &PyExc_RuntimeError != NULL ? PyExc_RuntimeError : NULL;
}
#define PyExc_RuntimeError mk_pyshim_runtime_error()

MK_PYWEAK PyObject* Py_BuildValue(const char*, ...);
MK_PYWEAK void Py_IncRef(PyObject*);
MK_PYWEAK void Py_DecRef(PyObject*);
MK_PYWEAK PyObject* PyErr_Occurred(void);
MK_PYWEAK void PyErr_Print(void);
MK_PYWEAK void PyErr_SetString(PyObject*, const char*);
MK_PYWEAK PyThreadState* PyEval_SaveThread(void);
MK_PYWEAK void PyEval_RestoreThread(PyThreadState*);
MK_PYWEAK PyGILState_STATE PyGILState_Ensure(void);
MK_PYWEAK void PyGILState_Release(PyGILState_STATE);
MK_PYWEAK char* PyBytes_AsString(PyObject*);
MK_PYWEAK PyObject* PyBytes_FromStringAndSize(const char*, Py_ssize_t);
MK_PYWEAK Py_ssize_t PyBytes_Size(PyObject*);
MK_PYWEAK Py_complex PyComplex_AsCComplex(PyObject*);
MK_PYWEAK PyObject* PyComplex_FromDoubles(double, double);
MK_PYWEAK PyObject* PyObject_CallObject(PyObject*, PyObject*);
MK_PYWEAK int PyCallable_Check(PyObject*);
MK_PYWEAK PyObject* PyObject_GetAttrString(PyObject*, const char*);
MK_PYWEAK PyObject* PyTuple_New(Py_ssize_t);
MK_PYWEAK int PyTuple_SetItem(PyObject*, Py_ssize_t, PyObject*);
MK_PYWEAK int PyObject_HasAttrString(PyObject*, const char*);

/* The macros gopy's preamble uses, mapped onto stable-ABI functions. */
#define Py_XINCREF(o) Py_IncRef((PyObject*)(o))
#define Py_XDECREF(o) Py_DecRef((PyObject*)(o))
#define Py_INCREF(o) Py_IncRef((PyObject*)(o))
#define Py_DECREF(o) Py_DecRef((PyObject*)(o))
/* Only used by gopy for Go funcs that take Python callbacks; mkernel's pyapi
 * exposes none, so a bound method is simply "has __self__". */
#define PyMethod_Check(o) PyObject_HasAttrString((PyObject*)(o), "__self__")

#endif /* MKERNEL_PYSHIM_PYTHON_H_ */
