// The Go control plane's C API, as seen by the C++ side of mkernel.
//
// The extension never links libmkernel_core: exactly one Go runtime may live in a process, and
// the gopy module already loads it. At import, Python hands the address of the library's
// `mk_api_v1` table (csrc/include/mkernel/core_api.h) to torch.ops.mkernel._bind_core, which
// checks it and keeps it in a process-global. Later C++ code reaches Go through core_api().
#pragma once

#include <mkernel/core_api.h>

#include <functional>
#include <optional>
#include <string>

namespace mkernel {

// The bound table. Throws a c10::Error ("mkernel core not bound: ...") if _bind_core has not run.
const mk_api_v1& core_api();

// Whether _bind_core has bound a table in this process.
bool core_bound() noexcept;

// Does nothing for MK_OK. Otherwise throws a c10::Error whose message names `what` (the call
// that failed), the status, and the core's last_error() message of this thread:
//   mkernel core: session_create failed with MK_ERR_TIMEOUT (2): <message from Go>
// MK_ERR_INVALID_ARGUMENT raises ValueError in Python, MK_ERR_NOT_SUPPORTED NotImplementedError,
// every other status RuntimeError.
void check_core(mk_status status, const char* what);

// check_core's message for a failed call, returned instead of thrown ("" for MK_OK): for code
// that reports a failure later or on another rank.
std::string core_failure_message(mk_status status, const char* what);

// The string a core call writes under core_api.h's buffer rule (NULL or a small buffer:
// MK_ERR_BUFFER_TOO_SMALL with the size needed in *len). The size is probed and the call
// repeated while the content outgrows the probe (live counters can grow between two calls).
// nullopt if the call fails otherwise.
std::optional<std::string> read_core_string(
    const std::function<mk_status(char* buf, size_t* len)>& call);

}  // namespace mkernel
