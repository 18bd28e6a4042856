"""Load a repository source file as a module without running it as a script (benchmarks and the
package's pure-Python helpers: their rank / parent code runs only as __main__ / __rank__)."""
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(relpath: str, name: str) -> ModuleType:
    """The module at ROOT / relpath under `name` (a name of its own per caller: no sys.modules
    entry is shared with another test's copy)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    assert spec is not None and spec.loader is not None, f"cannot load {relpath}"
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
