// The GEMM autotuner's table of plans and its file (see gemm_plan_store.h),
// plus the ops that move it between processes: gemm_plans_export,
// gemm_plans_import (mkernel.share_gemm_plans) and gemm_plans_file.
#include "gemm_plan_store.h"

#include <torch/library.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "cache_file.h"
#include "env_knobs.h"

namespace mkernel::plans {
namespace {

constexpr cache_file::Format kFormat{"mkernel-gemm-plans-1", "plans", "GEMM plan cache",
                                     "plan table"};

struct Table {
  std::mutex mu;
  bool loaded = false;
  std::map<std::string, std::string> plans;
  std::atomic<uint64_t> generation{0};
};
Table& table() {
  static auto* t = new Table();  // never destroyed: used until exit
  return *t;
}

bool file_cache_enabled() {
  const char* v = env::get("MKERNEL_GEMM_PLAN_CACHE");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Loads the file into the table once (t.mu held).
void ensure_loaded(Table& t) {
  if (t.loaded) return;
  t.loaded = true;
  const std::string path = file_path();
  if (path.empty()) return;
  for (auto& [k, v] : cache_file::read(path, kFormat)) t.plans.emplace(k, v);
}

}  // namespace

int64_t m_bucket(int64_t m) {
  int64_t b = 1;
  while (b < m) b <<= 1;
  return b;
}

std::string key(const std::string& device, const char* dtype, int64_t experts, int64_t m,
                int64_t n, int64_t k) {
  return device + "|" + dtype + "|e" + std::to_string(experts) + "|m" +
         std::to_string(m_bucket(m)) + "|n" + std::to_string(n) + "|k" + std::to_string(k);
}

bool parse(const std::string& json, std::map<std::string, std::string>* out) {
  return cache_file::parse(json, kFormat, out);
}

std::string format(const std::map<std::string, std::string>& table) {
  return cache_file::format(table, kFormat);
}

std::string file_path() {
  if (!file_cache_enabled()) return "";
  const std::string dir = cache_file::dir();
  return dir.empty() ? "" : dir + "/gemm_plans.json";
}

std::optional<std::string> find(const std::string& key) {
  Table& t = table();
  const std::lock_guard<std::mutex> lock(t.mu);
  ensure_loaded(t);
  auto it = t.plans.find(key);
  if (it == t.plans.end()) return std::nullopt;
  return it->second;
}

void insert(const std::string& key, const std::string& plan, bool persist) {
  Table& t = table();
  {
    const std::lock_guard<std::mutex> lock(t.mu);
    ensure_loaded(t);
    t.plans[key] = plan;
  }
  const std::string path = persist ? file_path() : "";
  if (!path.empty()) cache_file::merge(path, {{key, plan}}, kFormat);  // outside the table's lock
}

uint64_t generation() { return table().generation.load(std::memory_order_acquire); }

std::string export_json() {
  Table& t = table();
  const std::lock_guard<std::mutex> lock(t.mu);
  ensure_loaded(t);
  return format(t.plans);
}

int import_json(const std::string& json, bool persist) {
  std::map<std::string, std::string> add;
  if (!parse(json, &add)) {
    throw std::invalid_argument(std::string("not a GEMM plan table (want {\"format\": \"") +
                                kFormat.tag + "\", \"plans\": {key: plan}}), got " +
                                std::to_string(json.size()) + " bytes");
  }
  Table& t = table();
  {
    const std::lock_guard<std::mutex> lock(t.mu);
    ensure_loaded(t);
    for (const auto& [k, v] : add) t.plans[k] = v;
    t.generation.fetch_add(1, std::memory_order_acq_rel);
  }
  const std::string path = persist ? file_path() : "";
  if (!path.empty() && !add.empty()) cache_file::merge(path, add, kFormat);
  return static_cast<int>(add.size());
}

namespace {

int64_t import_op(const std::string& json, bool persist) {
  try {
    return import_json(json, persist);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "mkernel.gemm_plans_import: ", e.what());
  }
}

}  // namespace

// No tensor arguments: one kernel serves every dispatch key.
TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) {
  m.impl("gemm_plans_export", [] { return export_json(); });
  m.impl("gemm_plans_import", &import_op);
  m.impl("gemm_plans_file", [] { return file_path(); });
}

}  // namespace mkernel::plans
