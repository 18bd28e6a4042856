"""The MKERNEL_* environment variables are declared in one table per language and read through
one function (house style: "env variables only for log level, rendezvous address and documented
debug overrides, read in one file"): csrc/env_knobs.cpp (env::get) for the C++ side,
python/mkernel/_env_knobs.py (get) for the Python package. Checks, from the sources alone (no
extension, no GPU): every MKERNEL_* literal is registered; nothing reads one past the registry;
every entry is documented and still read somewhere; env::get refuses an unregistered name."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
PYPKG = ROOT / "python" / "mkernel"
CPP_TABLE = CSRC / "env_knobs.cpp"
PY_TABLE = PYPKG / "_env_knobs.py"
CPP_SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".hpp", ".inc"}

# C++ files that still call std::getenv on MKERNEL_* names themselves.
GETENV_EXCEPTIONS: set[str] = set()

# Literals "MKERNEL_..." that are not environment variables read by this code (macro names in
# strings, log prefixes, ...): none today. Add one with a comment saying what it is.
NOT_ENV: set[str] = set()

_CPP_LITERAL = re.compile(r'"(MKERNEL_[A-Z0-9_]+)"')
_PY_LITERAL = re.compile(r"""["'](MKERNEL_[A-Z0-9_]+)["']""")
_STR = r'"(?:[^"\\]|\\.)*"'
# One table entry: {"NAME", kDebug|kConfig, "values", "default", "doc" ["more doc" ...]}.
_CPP_ENTRY = re.compile(r'\{\s*"(MKERNEL_[A-Z0-9_]+)",\s*(kDebug|kConfig),\s*(' + _STR + r'),\s*(' + _STR +
                        r'),\s*((?:' + _STR + r'\s*)+)\}')


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _cpp_sources() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*") if p.suffix in CPP_SUFFIXES and p.is_file())


def _py_sources() -> list[Path]:
    return sorted(p for p in PYPKG.rglob("*.py") if p.is_file())


def _unquote(literals: str) -> str:
    """The value of adjacent C string literals (no escapes beyond \\" and \\\\ expected)."""
    parts = re.findall(_STR, literals)
    return "".join(p[1:-1].replace('\\"', '"').replace("\\\\", "\\") for p in parts)


def _strip_cpp_comments(text: str) -> str:
    """The code without // and /* */ comments (string literals kept; good enough for getenv calls)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _cpp_table() -> dict[str, tuple[str, str, str, str]]:
    text = CPP_TABLE.read_text()
    entries = _CPP_ENTRY.findall(text)
    names = [e[0] for e in entries]
    # Every {"MKERNEL_ opening is an entry the regex understood (no silently skipped entry).
    assert len(entries) == text.count('{"MKERNEL_'), "csrc/env_knobs.cpp: an entry the test cannot parse"
    assert len(set(names)) == len(names), "csrc/env_knobs.cpp: a name registered twice"
    assert names == sorted(names), "csrc/env_knobs.cpp: kKnobs must stay sorted by name"
    return {e[0]: (e[1], _unquote(e[2]), _unquote(e[3]), _unquote(e[4])) for e in entries}


def _py_table():
    # By path: importing the mkernel package needs the built extension; this module needs nothing.
    spec = importlib.util.spec_from_file_location("env_knobs_under_test", PY_TABLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_cpp_literal_is_registered() -> None:
    table = _cpp_table()
    missing = sorted({f"{_rel(p)}: {name}" for p in _cpp_sources() if p != CPP_TABLE
                      for name in _CPP_LITERAL.findall(p.read_text(errors="replace"))
                      if name not in table and name not in NOT_ENV})
    assert not missing, ("MKERNEL_* literals of csrc/ missing from csrc/env_knobs.cpp kKnobs "
                         "(register them, or list non-variables in NOT_ENV):\n" + "\n".join(missing))


def test_every_python_literal_is_registered() -> None:
    cpp, py = _cpp_table(), _py_table().KNOBS
    missing = sorted({f"{_rel(p)}: {name}" for p in _py_sources() if p != PY_TABLE
                      for name in _PY_LITERAL.findall(p.read_text(errors="replace"))
                      if name not in py and name not in cpp and name not in NOT_ENV})
    assert not missing, ("MKERNEL_* literals of python/mkernel missing from both tables "
                         "(python/mkernel/_env_knobs.py KNOBS or csrc/env_knobs.cpp):\n" + "\n".join(missing))


def test_cpp_reads_go_through_env_get() -> None:
    """No getenv of an MKERNEL_* name outside csrc/env_knobs.cpp, and no getenv of a name held in
    a variable (which could be one): other variables (CUDA_*, HOME, ...) are read by literal."""
    bad = []
    for p in _cpp_sources():
        rel = _rel(p)
        if p == CPP_TABLE or rel in GETENV_EXCEPTIONS:
            continue
        code = _strip_cpp_comments(p.read_text(errors="replace"))
        for m in re.finditer(r"\bgetenv\s*\(\s*([^)]*)\)", code):
            arg = m.group(1).strip()
            if not arg.startswith('"') or arg.startswith('"MKERNEL_'):
                line = code.count("\n", 0, m.start()) + 1
                bad.append(f"{rel}:{line} (comments stripped): getenv({arg})")
    assert not bad, "read these through mkernel::env::get (csrc/env_knobs.h):\n" + "\n".join(bad)


def test_python_reads_go_through_get() -> None:
    read = re.compile(r"""(?:os\.getenv\(|os\.environ\.get\(|os\.environ\[)\s*["']MKERNEL_""")
    bad = [f"{_rel(p)}:{text.count(chr(10), 0, m.start()) + 1}"
           for p in _py_sources() if p != PY_TABLE
           for text in [p.read_text(errors="replace")] for m in read.finditer(text)]
    assert not bad, "read these through mkernel._env_knobs.get:\n" + "\n".join(bad)


def test_cpp_entries_are_documented_and_read() -> None:
    table = _cpp_table()
    assert len(table) > 0
    for name, (kind, values, default, doc) in table.items():
        assert doc.strip() and values.strip() and default.strip(), f"csrc/env_knobs.cpp {name}: empty field"
        assert kind in ("kDebug", "kConfig"), name
    used = {name for p in _cpp_sources() if p != CPP_TABLE for name in _CPP_LITERAL.findall(p.read_text())}
    stale = sorted(set(table) - used)
    assert not stale, f"registered in csrc/env_knobs.cpp but read nowhere in csrc/ (remove them): {stale}"


def test_python_entries_are_documented_and_read() -> None:
    mod = _py_table()
    assert len(mod.KNOBS) > 0
    for name, k in mod.KNOBS.items():
        assert k.name == name and name.startswith("MKERNEL_"), name
        assert k.doc.strip() and k.values.strip() and k.default.strip(), f"_env_knobs.py {name}: empty field"
        assert k.kind in (mod.DEBUG, mod.CONFIG), name
    used = {name for p in _py_sources() if p != PY_TABLE for name in _PY_LITERAL.findall(p.read_text())}
    stale = sorted(set(mod.KNOBS) - used)
    assert not stale, f"registered in python/mkernel/_env_knobs.py but read nowhere (remove them): {stale}"


def test_python_get(monkeypatch) -> None:
    mod = _py_table()
    monkeypatch.setenv("MKERNEL_ATTN_BWD", "flash")
    assert mod.get("MKERNEL_ATTN_BWD") == "flash"
    assert mod.get("MKERNEL_PYTHON", "", {"MKERNEL_PYTHON": "/x"}) == "/x"
    assert mod.get("MKERNEL_PYTHON", "dflt", {}) == "dflt"
    with pytest.raises(ValueError, match="MKERNEL_NOT_A_KNOB is read but not registered"):
        mod.get("MKERNEL_NOT_A_KNOB")


_DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include "env_knobs.h"
int main() {
  using namespace mkernel;
  setenv("MKERNEL_OP_TIMEOUT", "7", 1);
  const char* v = env::get("MKERNEL_OP_TIMEOUT");
  if (v == nullptr || std::strcmp(v, "7") != 0) return 1;
  unsetenv("MKERNEL_OP_TIMEOUT");
  if (env::get("MKERNEL_OP_TIMEOUT") != nullptr) return 2;
  std::size_t n = 0;
  for (const env::Knob& k : env::knobs()) {
    if (env::find(k.name) != &k) return 3;
    ++n;
  }
  if (n != env::knobs().size || env::find("MKERNEL_NOT_A_KNOB") != nullptr) return 4;
  try {
    env::get("MKERNEL_NOT_A_KNOB");
    return 5;
  } catch (const std::invalid_argument& e) {
    std::printf("%s\n", e.what());
  }
  std::printf("OK %zu\n", n);
  return 0;
}
"""


def test_cpp_get_refuses_unregistered_names(tmp_path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    (tmp_path / "driver.cpp").write_text(_DRIVER)
    exe = tmp_path / "driver"
    subprocess.run([gxx, "-std=c++17", "-O0", "-Wall", "-Werror", f"-I{CSRC}", str(tmp_path / "driver.cpp"),
                    str(CPP_TABLE), "-o", str(exe)], check=True, capture_output=True, timeout=60)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("mkernel: env variable MKERNEL_NOT_A_KNOB is read but not registered in csrc/env_knobs.cpp"
            in r.stdout), r.stdout
    assert f"OK {len(_cpp_table())}" in r.stdout, r.stdout


def test_knobs_command_lists_both_sides(capsys) -> None:
    """`python -m mkernel knobs --json`: the C++ side's table (through the extension's
    _env_knobs op) and the Python side's, every row documented, sorted by name."""
    import json

    import pytest

    torch = pytest.importorskip("torch")
    from mkernel import ops  # noqa: F401  (loads the extension)
    from mkernel.__main__ import main

    if not hasattr(torch.ops.mkernel, "_env_knobs"):
        pytest.skip("the extension is not built")
    assert main(["knobs", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in rows]
    assert names == sorted(names) and len(names) == len(set(names))
    assert "MKERNEL_OP_TIMEOUT" in names  # C++ table
    assert "MKERNEL_LOG_LEVEL" in names  # Python table
    for r in rows:
        assert r["kind"] in ("config", "debug") and r["doc"] and r["default"] and r["values"], r
