// The MKERNEL_* environment variables the C++ side reads: each one declared and documented in
// one table (env_knobs.cpp kKnobs) and read through one function, env::get (house style: env
// variables only for log level, rendezvous address and documented debug overrides, read in one
// file). tests/core/test_env_knobs.py checks that every MKERNEL_* literal of csrc/ is
// registered and that nothing else calls getenv on one.
//
// Header-light (no torch, no CUDA): env_knobs.cpp links into the extension, its CUDA
// translation units and the torch-free copier helper (csrc/tools/gdr_copier_main.cpp).
#pragma once

#include <cstddef>

namespace mkernel::env {

enum class Kind {
  kDebug,   // a documented debug / measurement override (tests, benchmarks, A/B pins)
  kConfig,  // user configuration (timeouts, paths, the transport, the emulated node)
};

struct Knob {
  const char* name;  // "MKERNEL_..."
  Kind kind;
  const char* values;  // the allowed values or the value's syntax
  const char* dflt;    // what unset means
  const char* doc;     // one line: what it does
};

// Every registered variable, sorted by name.
struct Table {
  const Knob* data;
  std::size_t size;
  const Knob* begin() const { return data; }
  const Knob* end() const { return data + size; }
};
Table knobs();

// The entry of `name`; nullptr where it is not registered.
const Knob* find(const char* name);

// std::getenv(name) for a registered name (nullptr when unset). Any other name throws
// std::invalid_argument ("mkernel: env variable X is read but not registered in
// csrc/env_knobs.cpp"): a programming error, which tests/core/test_env_knobs.py catches first.
const char* get(const char* name);

}  // namespace mkernel::env
