// The GEMM autotuner's plans as data: keys, the M buckets they are tuned for,
// the process-wide table and its file. Plain C++ (no CUDA): the table, its
// JSON and the file run and are tested on any machine; gemm_autotune.cpp
// (CUDA) fills it and reads it.
//
// Key: one line of text, "<device>|<dtype>|e<experts>|m<M bucket>|n<N>|k<K>"
// where <device> names what the timings depend on ("NVIDIA H200;sm90;sms132;
// drv13000;rt13000;tune2": model, compute capability, SMs of the launch,
// driver and runtime versions, the tuner's timing method). Plan: "<config name>/s<swizzle>/<m|n>".
// Both are strings so a plan travels unchanged through the file, between ranks
// (mkernel.share_gemm_plans) and across builds that renumber configs.
//
// The file: gemm_plans.json in cache_file.h's directory, read once per process,
// merged and replaced atomically under its lock (cache_file::merge); an
// unreadable or corrupt file counts as empty (one warning) and is rewritten on the next
// store. MKERNEL_GEMM_PLAN_CACHE=0 keeps plans in memory only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace mkernel::plans {

// The M a plan is tuned for: the next power of two >= m (m >= 1). New token
// counts (MoE routing, dynamic batch) reuse the plan of their bucket instead
// of stalling a step on a new tuning. Powers of two also split the shape
// classes of gemm::candidate_plans (m <= 256, <= 1024) exactly.
int64_t m_bucket(int64_t m);

// The key of a plan (see above); `device` from the CUDA side.
std::string key(const std::string& device, const char* dtype, int64_t experts, int64_t m,
                int64_t n, int64_t k);

// The process's table of tuned plans (thread-safe), backed by the file.
// Values are the tuner's measurements or imported from another rank/file.
std::optional<std::string> find(const std::string& key);
// Records a plan; with `persist` (and the file cache on) merges it into the file.
void insert(const std::string& key, const std::string& plan, bool persist);
// Bumped by every import: callers holding derived caches drop them.
uint64_t generation();

// The table as JSON: {"format": "mkernel-gemm-plans-1", "plans": {key: plan, ...}}.
std::string export_json();
// Merges a table in export_json's format (imported plans replace the process's
// own for the same key); returns how many it holds. Throws std::invalid_argument
// on text that is not such a table.
int import_json(const std::string& json, bool persist);

// The JSON codec and the file, exposed for tests.
bool parse(const std::string& json, std::map<std::string, std::string>* out);
std::string format(const std::map<std::string, std::string>& table);
std::string file_path();  // "" when the file cache is off or no directory is known

}  // namespace mkernel::plans
