// mkernel._C as a Python module. It defines no Python functions: the ops are reached through
// torch.ops.mkernel (see registration.cpp). Importing it (or torch.ops.load_library on its
// path) runs the static initializers that register the ops. The module uses only the stable
// ABI, so one wheel serves every CPython >= 3.10 (setup.py builds it with py_limited_api=True).
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#include <Python.h>

extern "C" {

PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT,
      "_C",                                                             // m_name
      "mkernel's torch extension: its ops live in torch.ops.mkernel.",  // m_doc
      -1,                                                               // m_size: no state
      nullptr,                                                          // m_methods: none
      nullptr,                                                          // m_slots
      nullptr,                                                          // m_traverse
      nullptr,                                                          // m_clear
      nullptr,                                                          // m_free
  };
  return PyModule_Create(&module_def);
}

}  // extern "C"
