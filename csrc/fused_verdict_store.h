// The fused ops' first-call verdicts kept across processes: a job's next run (a restart, the
// next training script, another inference server of the same shapes) reuses what choose_path
// measured (fused_common.cpp) instead of 1-4 s of paired rounds per shape on every rank. Plain
// C++ (no torch, no CUDA): the table and its file run and are tested on any machine.
//
// Key: what the verdict depends on, one line of text:
//   "<device>|<build>|<op>|<group layout>|<shape key or its M bucket> paths=<names> gate=<g>"
// <device> as the GEMM plans' (model, SMs of this process, driver, runtime: an MPS share has
// its own), <build> the extension binary's size and time (a rebuilt kernel is measured again),
// the layout the group's nodes rank by rank, the paths every candidate by name in the order
// the op lists them (a changed candidate list is another key). Value: "<path name>@<the shape key
// the rounds ran at>". The ranks agree before using one (choose_path all-gathers what each
// found): a rank that finds none, or another verdict, makes the group measure. An unfused
// verdict that left a fused edge unconfirmed is not stored (fused_verdict.h storable).
//
// The file: cache_file.h's directory, fused_verdicts.json; MKERNEL_FUSED_VERDICT_CACHE=0 keeps
// verdicts in memory only (every process measures, as before session 55).
#pragma once

#include <optional>
#include <string>

namespace mkernel::fused_store {

struct Verdict {
  std::string path;         // the chosen path by name ("unfused", "coop_128x256_c2x1 grid 28 ...")
  std::string measured_at;  // the shape key whose rounds decided it
};

// "<path>@<measured_at>" and back (nullopt for text without the '@' or with an empty path).
std::string encode(const Verdict& v);
std::optional<Verdict> decode(const std::string& text);

// The file's entry for `key` (read once per process); nullopt when none or the file is off.
std::optional<Verdict> find(const std::string& key);
// Records a verdict in the file (merged under its lock; a no-op when the file is off).
void insert(const std::string& key, const Verdict& v);

// The file's path; "" when MKERNEL_FUSED_VERDICT_CACHE=0 or no cache directory is known.
std::string file_path();

}  // namespace mkernel::fused_store
