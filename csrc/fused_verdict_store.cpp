// The fused ops' verdicts across processes (fused_verdict_store.h).
#include "fused_verdict_store.h"

#include <cstring>
#include <map>
#include <mutex>

#include "cache_file.h"
#include "env_knobs.h"

namespace mkernel::fused_store {
namespace {

constexpr cache_file::Format kFormat{"mkernel-fused-verdicts-1", "verdicts", "fused verdict cache",
                                     "verdict table"};

struct Table {
  std::mutex mu;
  bool loaded = false;
  std::string path;  // the file read at the first find
  cache_file::Table entries;
};
Table& table() {
  static auto* t = new Table();  // never destroyed: used until exit
  return *t;
}

bool file_enabled() {
  const char* v = env::get("MKERNEL_FUSED_VERDICT_CACHE");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

std::string encode(const Verdict& v) { return v.path + "@" + v.measured_at; }

std::optional<Verdict> decode(const std::string& text) {
  // A path name never holds '@'; a shape key might in some future, so split at the first.
  const size_t at = text.find('@');
  if (at == std::string::npos || at == 0) return std::nullopt;
  return Verdict{text.substr(0, at), text.substr(at + 1)};
}

std::string file_path() {
  if (!file_enabled()) return "";
  const std::string dir = cache_file::dir();
  return dir.empty() ? "" : dir + "/fused_verdicts.json";
}

std::optional<Verdict> find(const std::string& key) {
  const std::string path = file_path();
  if (path.empty()) return std::nullopt;
  Table& t = table();
  const std::lock_guard<std::mutex> lock(t.mu);
  if (!t.loaded || t.path != path) {  // once per process (again if the directory moved)
    t.entries = cache_file::read(path, kFormat);
    t.path = path;
    t.loaded = true;
  }
  auto it = t.entries.find(key);
  if (it == t.entries.end()) return std::nullopt;
  return decode(it->second);
}

void insert(const std::string& key, const Verdict& v) {
  const std::string path = file_path();
  if (path.empty()) return;
  const std::string text = encode(v);
  {
    Table& t = table();
    const std::lock_guard<std::mutex> lock(t.mu);
    if (t.loaded && t.path == path) t.entries[key] = text;
  }
  cache_file::merge(path, {{key, text}}, kFormat);
}

}  // namespace mkernel::fused_store
