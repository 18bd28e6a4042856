// Typedefs that let cgo's generated prototypes (_cgo_export.h) carry the
// const qualifiers of core_api.h, so table.c can assign the //export
// functions to the table without casts (a cast would hide ABI drift).
#ifndef MKERNEL_CAPI_TYPES_H_
#define MKERNEL_CAPI_TYPES_H_
#include <stdint.h>
#include "mkernel/core_api.h"
typedef const char* mk_cstr;
typedef const void* mk_cbytes;
typedef const mk_session_config* mk_cconfig;
typedef const mk_datapath_config* mk_cdpconfig;
void mk_capi_set_last_error(const char* msg);
const char* mk_capi_get_last_error(void);
uintptr_t mk_capi_table_address(void);
#endif
