// The GEMM autotuner's table of plans and its file (see gemm_plan_store.h),
// plus the ops that move it between processes: gemm_plans_export,
// gemm_plans_import (mkernel.share_gemm_plans) and gemm_plans_file.
#include "gemm_plan_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <torch/library.h>

#include "env_knobs.h"

namespace mkernel::plans {
namespace {

constexpr const char* kFormat = "mkernel-gemm-plans-1";

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

void warn(const std::string& what) {
  std::fprintf(stderr, "mkernel: GEMM plan cache: %s\n", what.c_str());
}

bool file_cache_enabled() {
  const char* v = env::get("MKERNEL_GEMM_PLAN_CACHE");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::string cache_dir() {
  if (const char* d = env::get("MKERNEL_CACHE_DIR"); d != nullptr && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x)
    return std::string(x) + "/mkernel";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h)
    return std::string(h) + "/.cache/mkernel";
  return "";
}

bool make_dirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// The file's table; an absent file is empty, an unreadable or corrupt one too
// (with a warning: it is rewritten whole on the next store).
std::map<std::string, std::string> read_file(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  if (!in) return out;
  std::stringstream ss;
  ss << in.rdbuf();
  if (!parse(ss.str(), &out)) {
    warn(path + " is not a plan table (corrupt or from another version): ignored, and "
                "replaced on the next tuning");
    out.clear();
  }
  return out;
}

// Merges `add` into the file: under an exclusive lock on <path>.lock, read,
// merge, write <path>.tmp.<pid>.<thread>, rename over <path> (atomic).
void merge_into_file(const std::string& path, const std::map<std::string, std::string>& add) {
  const std::string dir = path.substr(0, path.rfind('/'));
  if (!make_dirs(dir)) {
    warn("cannot create " + dir + " (" + std::strerror(errno) + "): plans stay in memory");
    return;
  }
  const int lock = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    warn("cannot lock " + path + ".lock (" + std::strerror(errno) + "): plans stay in memory");
    if (lock >= 0) ::close(lock);
    return;
  }
  std::map<std::string, std::string> merged = read_file(path);
  for (const auto& [k, v] : add) merged[k] = v;
  std::ostringstream tmp;
  tmp << path << ".tmp." << ::getpid() << "." << std::hash<std::thread::id>()(std::this_thread::get_id());
  bool ok = false;
  {
    std::ofstream out(tmp.str(), std::ios::trunc);
    out << format(merged);
    out.flush();
    ok = static_cast<bool>(out);
  }
  if (!ok || std::rename(tmp.str().c_str(), path.c_str()) != 0) {
    warn("cannot write " + path + " (" + std::strerror(errno) + "): plans stay in memory");
    std::remove(tmp.str().c_str());
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
}

// Loads the file into the table once (t.mu held).
void ensure_loaded(Table& t) {
  if (t.loaded) return;
  t.loaded = true;
  const std::string path = file_path();
  if (path.empty()) return;
  for (auto& [k, v] : read_file(path)) t.plans.emplace(std::move(k), std::move(v));
}

// --- a JSON reader for exactly what format() writes (objects of strings) ---
struct Reader {
  const std::string& s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool str(std::string* out) {
    if (!eat('"')) return false;
    out->clear();
    while (i < s.size()) {
      const char c = s[i++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (i >= s.size()) return false;
      const char e = s[i++];
      switch (e) {
        case '"': case '\\': case '/': out->push_back(e); break;
        case 'n': out->push_back('\n'); break;
        case 't': out->push_back('\t'); break;
        case 'r': out->push_back('\r'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'u': {  // format() writes only \u00XX
          if (i + 4 > s.size()) return false;
          const unsigned long cp = std::strtoul(s.substr(i, 4).c_str(), nullptr, 16);
          if (cp >= 0x80) return false;
          out->push_back(static_cast<char>(cp));
          i += 4;
          break;
        }
        default: return false;
      }
    }
    return false;
  }
};

void quote(std::string* out, const std::string& v) {
  out->push_back('"');
  for (const char c : v) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      *out += buf;
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
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
  Reader r{json};
  std::map<std::string, std::string> plans;
  bool format_ok = false;
  if (!r.eat('{')) return false;
  std::string name;
  bool first = true;
  while (!r.eat('}')) {
    if (!first && !r.eat(',')) return false;
    first = false;
    if (!r.str(&name) || !r.eat(':')) return false;
    if (name == "format") {
      std::string v;
      if (!r.str(&v) || v != kFormat) return false;
      format_ok = true;
    } else if (name == "plans") {
      if (!r.eat('{')) return false;
      bool first_plan = true;
      std::string k, v;
      while (!r.eat('}')) {
        if (!first_plan && !r.eat(',')) return false;
        first_plan = false;
        if (!r.str(&k) || !r.eat(':') || !r.str(&v)) return false;
        plans[k] = v;
      }
    } else {
      return false;
    }
  }
  r.ws();
  if (!format_ok || r.i != json.size()) return false;
  *out = std::move(plans);
  return true;
}

std::string format(const std::map<std::string, std::string>& table) {
  std::string out = "{\n  \"format\": \"";
  out += kFormat;
  out += "\",\n  \"plans\": {";
  bool first = true;
  for (const auto& [k, v] : table) {
    out += first ? "\n    " : ",\n    ";
    first = false;
    quote(&out, k);
    out += ": ";
    quote(&out, v);
  }
  out += first ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

std::string file_path() {
  if (!file_cache_enabled()) return "";
  const std::string dir = cache_dir();
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
  if (!path.empty()) merge_into_file(path, {{key, plan}});  // outside the table's lock
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
                                kFormat + "\", \"plans\": {key: plan}}), got " +
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
  if (!path.empty() && !add.empty()) merge_into_file(path, add);
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
