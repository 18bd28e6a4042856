// mkernel's cache files (cache_file.h): the directory, the JSON codec and the locked, atomic
// merge shared by the GEMM plan cache and the fused verdict cache.
#include "cache_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "env_knobs.h"

namespace mkernel::cache_file {
namespace {

void warn(const Format& f, const std::string& what) {
  std::fprintf(stderr, "mkernel: %s: %s\n", f.what, what.c_str());
}

bool make_dirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string part = path.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// A JSON reader for exactly what format() writes (objects of strings).
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
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'u': {  // format() writes only \u00XX
          if (i + 4 > s.size()) return false;
          const unsigned long cp = std::strtoul(s.substr(i, 4).c_str(), nullptr, 16);
          if (cp >= 0x80) return false;
          out->push_back(static_cast<char>(cp));
          i += 4;
          break;
        }
        default:
          return false;
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

std::string dir() {
  if (const char* d = env::get("MKERNEL_CACHE_DIR"); d != nullptr && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x)
    return std::string(x) + "/mkernel";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h)
    return std::string(h) + "/.cache/mkernel";
  return "";
}

bool parse(const std::string& json, const Format& f, Table* out) {
  Reader r{json};
  Table entries;
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
      if (!r.str(&v) || v != f.tag) return false;
      format_ok = true;
    } else if (name == f.entries) {
      if (!r.eat('{')) return false;
      bool first_entry = true;
      std::string k, v;
      while (!r.eat('}')) {
        if (!first_entry && !r.eat(',')) return false;
        first_entry = false;
        if (!r.str(&k) || !r.eat(':') || !r.str(&v)) return false;
        entries[k] = v;
      }
    } else {
      return false;
    }
  }
  r.ws();
  if (!format_ok || r.i != json.size()) return false;
  *out = std::move(entries);
  return true;
}

std::string format(const Table& table, const Format& f) {
  std::string out = "{\n  \"format\": \"";
  out += f.tag;
  out += "\",\n  \"";
  out += f.entries;
  out += "\": {";
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

Table read(const std::string& path, const Format& f) {
  Table out;
  std::ifstream in(path);
  if (!in) return out;
  std::stringstream ss;
  ss << in.rdbuf();
  if (!parse(ss.str(), f, &out)) {
    warn(f, path + " is not a " + f.noun +
                " (corrupt or from another version): ignored, and replaced on the next store");
    out.clear();
  }
  return out;
}

void merge(const std::string& path, const Table& add, const Format& f) {
  const std::string parent = path.substr(0, path.rfind('/'));
  if (!make_dirs(parent)) {
    warn(f, "cannot create " + parent + " (" + std::strerror(errno) + "): kept in memory only");
    return;
  }
  const int lock = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    warn(f, "cannot lock " + path + ".lock (" + std::strerror(errno) + "): kept in memory only");
    if (lock >= 0) ::close(lock);
    return;
  }
  Table merged = read(path, f);
  for (const auto& [k, v] : add) merged[k] = v;
  std::ostringstream tmp;
  tmp << path << ".tmp." << ::getpid() << "."
      << std::hash<std::thread::id>()(std::this_thread::get_id());
  bool ok = false;
  {
    std::ofstream out(tmp.str(), std::ios::trunc);
    out << format(merged, f);
    out.flush();
    ok = static_cast<bool>(out);
  }
  if (!ok || std::rename(tmp.str().c_str(), path.c_str()) != 0) {
    warn(f, "cannot write " + path + " (" + std::strerror(errno) + "): kept in memory only");
    std::remove(tmp.str().c_str());
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
}

}  // namespace mkernel::cache_file
