"""mkernel.ops: the public wrappers' group handling and import-time footprint."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from .helpers import assert_tensor, group, t

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtime_stub(monkeypatch):
    """Replaces mkernel.runtime with a stub whose current_group() the test sets."""
    stub = types.ModuleType("mkernel.runtime")
    monkeypatch.setitem(sys.modules, "mkernel.runtime", stub)
    return stub


def test_default_group_from_runtime(ops, runtime_stub):
    runtime_stub.current_group = lambda: group(3)
    out = ops.ag_gemm(t((5, 16), "meta"), t((8, 16), "meta"))
    assert_tensor(out, (15, 8), torch.bfloat16, "meta")
    assert_tensor(
        ops.gemm_rs(t((6, 16), "meta"), t((8, 16), "meta")), (2, 8), torch.bfloat16, "meta"
    )


def test_default_group_before_init(ops, runtime_stub):
    def current_group():
        raise RuntimeError("mkernel.init() has not been called")

    runtime_stub.current_group = current_group
    with pytest.raises(RuntimeError, match=r"mkernel\.init\(\) has not been called"):
        ops.gemm_ar(t((5, 16), "meta"), t((8, 16), "meta"))


def test_explicit_group_wins_over_default(ops, runtime_stub):
    def current_group():
        raise AssertionError("the default group must not be consulted")

    runtime_stub.current_group = current_group
    out, lse = ops.ring_attention(*(t((1, 7, 2, 16), "meta"),) * 3, group=group(2))
    assert_tensor(out, (1, 7, 2, 16), torch.bfloat16, "meta")
    assert_tensor(lse, (1, 2, 7), torch.float32, "meta")


def test_group_without_handle(ops):
    with pytest.raises(
        TypeError, match=r"mkernel\.gemm_ar: group must be an mkernel context .*got object"
    ):
        ops.gemm_ar(t((5, 16), "meta"), t((8, 16), "meta"), group=object())


def test_group_values_reach_the_op(ops):
    with pytest.raises(
        ValueError, match=r"mkernel\.gemm_ar: group must be an mkernel group handle >= 0"
    ):
        ops.gemm_ar(t((5, 16), "meta"), t((8, 16), "meta"), group=group(2, handle=-1))
    with pytest.raises(ValueError, match=r"mkernel\.gemm_ar: world_size must be >= 1, got 0"):
        ops.gemm_ar(t((5, 16), "meta"), t((8, 16), "meta"), group=group(0))


def test_fused_call_skips_a_python_autograd_kernel_without_gradients(ops):
    """ops._fused_op_call (the fused ops' wrappers) calls below autograd when neither operand
    needs a gradient, so a Python autograd kernel (what torch.library.register_autograd installs
    for ag_gemm / gemm_rs / gemm_ar) is not entered: ~5 us per call, which decode-sized calls
    feel. With a gradient to record the kernel runs; under no_grad it does not."""
    lib = torch.library.Library("mkwrapprobe", "FRAGMENT")
    lib.define("probe(Tensor x, Tensor w, int tag) -> Tensor")
    lib.impl("probe", lambda x, w, tag: x + w + tag, "CompositeExplicitAutograd")
    entered = []

    def autograd_kernel(keyset, x, w, tag):
        entered.append(tag)
        below = keyset & torch._C._after_autograd_keyset
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.mkwrapprobe.probe.default.redispatch(below, x, w, tag)

    lib.impl("probe", autograd_kernel, "Autograd", with_keyset=True)
    op = torch.ops.mkwrapprobe.probe.default
    x, w = torch.ones(3), torch.full((3,), 2.0)
    assert torch.equal(ops._fused_op_call(op, x, w, 1), torch.full((3,), 4.0))
    assert entered == []
    op(x, w, 2)  # the plain call enters it
    assert entered == [2]
    ops._fused_op_call(op, x, w.requires_grad_(), 3)  # a gradient to record: entered
    with torch.no_grad():
        ops._fused_op_call(op, x, w, 4)  # grad mode off: below autograd
    assert entered == [2, 3]
    del lib

def test_moe_combine_num_tokens_defaults_to_handle(ops):
    y, handle, weights = (
        t((2, 4, 16), "meta"),
        ops.MoeHandle(t((9, 2), "meta", torch.int64), t((2, 2), "meta", torch.int32)),
        t((9, 2), "meta", torch.float32),
    )
    assert_tensor(
        ops.moe_combine(y, handle, weights, group=group(2)), (9, 16), torch.bfloat16, "meta"
    )
    with pytest.raises(RuntimeError, match=r"num_tokens must equal the token count T of route"):
        ops.moe_combine(y, handle, weights, num_tokens=8, group=group(2))


def documented(source: str) -> dict[str, bool]:
    """Whether each module-level name of `source` is documented where it is defined: a def or
    class by its own docstring (not one it inherits or that Python generates, as for a
    NamedTuple or a dict), a constant by a comment right above it or a string right after it."""
    lines = source.splitlines()
    body = ast.parse(source).body
    docs: dict[str, bool] = {}
    for i, node in enumerate(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            docs[node.name] = bool(ast.get_docstring(node))  # the last def wins (@overload stubs)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            after = body[i + 1] if i + 1 < len(body) else None
            string_after = (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                            and isinstance(after.value.value, str))
            comment_above = node.lineno >= 2 and lines[node.lineno - 2].lstrip().startswith("#")
            for target in targets:
                if isinstance(target, ast.Name):
                    docs[target.id] = string_after or comment_above
    return docs


def test_exports_are_documented(ops):
    docs = documented(Path(ops.__file__).read_text())
    assert len(ops.__all__) == len(set(ops.__all__)), "duplicates in __all__"
    missing = [name for name in ops.__all__ if name not in docs]
    assert not missing, f"mkernel.ops.__all__ names what the module does not define: {missing}"
    undocumented = [name for name in ops.__all__ if not docs[name]]
    assert not undocumented, f"mkernel.ops exports undocumented names: {undocumented}"


def test_export_check_can_fail():
    """The check above rejects what a plain `obj.__doc__` check accepted: a dict (its class's
    docstring), a NamedTuple (a generated one), a function without a docstring."""
    source = "\n".join([
        "from typing import NamedTuple",
        "CONFIGS = {'a': 1}",
        "class Out(NamedTuple):",
        "    x: int",
        "def f():",
        "    return 1",
        "# documented above",
        "GOOD = 1",
        "ALSO_GOOD = 2",
        "'''documented after'''",
        "def g():",
        "    '''documented'''",
    ])
    assert documented(source) == {"CONFIGS": False, "Out": False, "f": False, "GOOD": True,
                                  "ALSO_GOOD": True, "g": True}


def test_import_needs_neither_go_nor_extension():
    """ops.py imports with torch alone: no Go library, no torch extension, no mkernel.runtime."""
    code = f"""
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("ops_alone", {str(ROOT / "python/mkernel/ops.py")!r})
module = importlib.util.module_from_spec(spec)
sys.modules["ops_alone"] = module
spec.loader.exec_module(module)
assert not [m for m in sys.modules if m.startswith("mkernel")], sorted(sys.modules)
assert "libmkernel_core" not in open("/proc/self/maps").read()
assert not hasattr(torch.ops.mkernel, "ag_gemm")
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
