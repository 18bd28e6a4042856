// Host check of csrc/cache_file.cpp and csrc/fused_verdict_store.cpp (driven by
// test_verdict_store.py). With no argument: the codecs, "OK". "write KEY TEXT": stores
// decode(TEXT) at KEY. "read KEY": the stored verdict's text, or "none". "path": the file.
#include <cstdio>
#include <cstring>
#include <string>

#include "cache_file.cpp"
#include "env_knobs.cpp"
#include "fused_verdict_store.cpp"

namespace {

int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

void codecs() {
  using mkernel::fused_store::decode;
  using mkernel::fused_store::encode;
  using mkernel::fused_store::Verdict;
  const Verdict v{"coop_128x256_c2x1 grid 28 peer-TMA order 0/0",
                  "M=1024 N=4096 K=8192 BFloat16 W=2"};
  const auto back = decode(encode(v));
  expect(back && back->path == v.path && back->measured_at == v.measured_at, "encode/decode");
  expect(!decode("no separator"), "decode refuses text without '@'");
  expect(!decode("@M=1"), "decode refuses an empty path");
  const auto empty_at = decode("unfused@");
  expect(empty_at && empty_at->path == "unfused" && empty_at->measured_at.empty(), "empty key");

  namespace cf = mkernel::cache_file;
  const cf::Format f{"mkernel-test-1", "entries", "test cache", "test table"};
  const cf::Table t{{"a \"quoted\" key\\", "tab\there"}, {"ctl\x01", "nl\n"}, {"", ""}};
  cf::Table back_t;
  expect(cf::parse(cf::format(t, f), f, &back_t) && back_t == t, "format/parse round trip");
  cf::Table none;
  expect(cf::parse(cf::format({}, f), f, &none) && none.empty(), "an empty table");
  const cf::Format other{"mkernel-test-2", "entries", "test cache", "test table"};
  cf::Table untouched{{"x", "y"}};
  expect(!cf::parse(cf::format(t, f), other, &untouched) && untouched.size() == 1,
         "another format's tag is refused, the output untouched");
  const cf::Format field{"mkernel-test-1", "plans", "test cache", "test table"};
  expect(!cf::parse(cf::format(t, f), field, &untouched), "an unknown field is refused");
  expect(!cf::parse(cf::format(t, f) + "x", f, &untouched), "trailing bytes are refused");
  expect(!cf::parse("{\"format\": \"mkernel-test-1\", \"entries\": {\"k\": 1}}", f, &untouched),
         "a value that is not a string is refused");
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = mkernel::fused_store;
  if (argc == 1) {
    codecs();
    if (failures == 0) std::printf("OK\n");
    return failures == 0 ? 0 : 1;
  }
  const std::string mode = argv[1];
  if (mode == "path") {
    std::printf("%s\n", fs::file_path().c_str());
    return 0;
  }
  if (mode == "write" && argc == 4) {
    const auto v = fs::decode(argv[3]);
    if (!v) return 2;
    fs::insert(argv[2], *v);
    return 0;
  }
  if (mode == "read" && argc == 3) {
    const auto v = fs::find(argv[2]);
    std::printf("%s\n", v ? fs::encode(*v).c_str() : "none");
    return 0;
  }
  return 2;
}
