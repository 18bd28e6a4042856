// torch.ops.mkernel._env_knobs(): the C++ side's registry of MKERNEL_* variables (env_knobs.h) as
// JSON, for `python -m mkernel knobs`. A TU of its own: env_knobs.cpp stays torch-free (the copier
// helper links it).
#include <torch/library.h>

#include <string>

#include "env_knobs.h"

namespace mkernel::env {
namespace {

void append_json_string(std::string& out, const char* s) {
  out += '"';
  for (const char* p = s; *p != '\0'; ++p) {
    const char c = *p;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xf];
      out += hex[c & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string knobs_json() {
  std::string out = "[";
  bool first = true;
  for (const Knob& k : knobs()) {
    if (!first) out += ',';
    first = false;
    out += "{\"name\":";
    append_json_string(out, k.name);
    out += ",\"kind\":";
    append_json_string(out, k.kind == Kind::kConfig ? "config" : "debug");
    out += ",\"values\":";
    append_json_string(out, k.values);
    out += ",\"default\":";
    append_json_string(out, k.dflt);
    out += ",\"doc\":";
    append_json_string(out, k.doc);
    out += '}';
  }
  out += ']';
  return out;
}

}  // namespace
}  // namespace mkernel::env

TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) {
  m.impl("_env_knobs", &mkernel::env::knobs_json);
}
