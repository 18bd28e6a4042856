// mkernel's cache files: one JSON table of string keys to string values per file, in one
// directory ($MKERNEL_CACHE_DIR, else $XDG_CACHE_HOME/mkernel, else ~/.cache/mkernel). The GEMM
// autotuner's plans (gemm_plan_store.h) and the fused ops' first-call verdicts
// (fused_verdict_store.h) live there. Plain C++17 (no torch, no CUDA): runs and is tested on any
// machine.
//
// A file is {"format": "<tag>", "<entries>": {key: value, ...}}. It is read whole, merged and
// replaced atomically (write a temporary file, rename) under an advisory lock on <file>.lock, so
// concurrent processes (the ranks of a job on one host) never see half a file; an unreadable or
// corrupt one counts as empty (one warning) and is rewritten whole on the next store.
#pragma once

#include <map>
#include <string>

namespace mkernel::cache_file {

using Table = std::map<std::string, std::string>;

// What a file holds, for its JSON and its warnings.
struct Format {
  const char* tag;      // the "format" value ("mkernel-gemm-plans-1")
  const char* entries;  // the table's field ("plans")
  const char* what;     // the warnings' subject ("GEMM plan cache")
  const char* noun;     // what a good file is ("plan table")
};

// The cache directory (see above); "" when none is known.
std::string dir();

// The JSON codec: exactly what format() writes (objects of strings). parse() is false on any
// other text (a wrong tag, a field it does not know, trailing bytes), leaving *out unchanged.
bool parse(const std::string& json, const Format& f, Table* out);
std::string format(const Table& table, const Format& f);

// The file's table: empty when it is absent, and when it is unreadable or corrupt (with a
// warning on stderr naming it).
Table read(const std::string& path, const Format& f);

// Merges `add` into the file (creating its directory): under the lock, read, merge, write,
// rename. A failure warns (the values stay in the caller's memory) and never throws.
void merge(const std::string& path, const Table& add, const Format& f);

}  // namespace mkernel::cache_file
