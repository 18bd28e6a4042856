"""CUDA_MODULE_LOADING=EAGER under the GPU-direct emulation with the in-process copier
(python/mkernel/_module_loading.py): set at import when MKERNEL_NET_GDR=1 asks for the emulation
and MKERNEL_NET_GDR_COPIER is thread, before anything initializes CUDA; a value the user chose is
kept; nothing changes without the emulation or under the copier process."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mkernel import _module_loading as ml

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("gdr, user, want", [
    ("1", None, "EAGER"),        # the emulation, nothing chosen: eager
    (" 1\n", None, "EAGER"),     # spaces as net_path.cpp's gpu_direct_env ignores them
    ("1", "", "EAGER"),          # empty counts as unset
    ("1", "LAZY", "LAZY"),       # the user's choice stays (net_path.cpp warns)
    ("1", "EAGER", "EAGER"),
    ("0", None, None),           # no emulation: untouched
    (None, None, "EAGER" if ml.GDR_BY_DEFAULT else None),  # unset: the default (net_path.cpp's)
    ("", None, "EAGER" if ml.GDR_BY_DEFAULT else None),
])
def test_eager_loading_for_gdr(gdr, user, want):
    env = {ml.COPIER_ENV: "thread"}
    if gdr is not None:
        env[ml.GDR_ENV] = gdr
    if user is not None:
        env[ml.ENV] = user
    before = dict(env)
    changed = ml.eager_loading_for_gdr(env)
    assert env.get(ml.ENV) == want
    assert changed == (env != before) == (want is not None and user in (None, ""))
    assert {k: v for k, v in env.items() if k != ml.ENV} == {k: v for k, v in before.items() if k != ml.ENV}


@pytest.mark.parametrize("copier, want", [("process", None), (" process ", None), ("thread", "EAGER"),
                                           ("", "EAGER" if ml.DEFAULT_COPIER == "thread" else None)])
def test_no_eager_loading_for_the_copier_process(copier, want):
    """The copier process is another CUDA client: the rank keeps CUDA's (lazy) default."""
    env = {ml.GDR_ENV: "1", ml.COPIER_ENV: copier}
    ml.eager_loading_for_gdr(env)
    assert env.get(ml.ENV) == want


@pytest.mark.parametrize("gdr, user, want", [("1", None, sys.executable), ("1", "/x/python", "/x/python"),
                                              ("0", None, None),
                                              (None, None, sys.executable if ml.GDR_BY_DEFAULT else None)])
def test_interpreter_for_gdr(gdr, user, want):
    """MKERNEL_PYTHON (the copier process's interpreter) under the emulation; a user's value stays."""
    env = {}
    if gdr is not None:
        env[ml.GDR_ENV] = gdr
    if user is not None:
        env[ml.PYTHON_ENV] = user
    ml.interpreter_for_gdr(env)
    assert env.get(ml.PYTHON_ENV) == want


def test_init_sets_it_before_the_native_parts_load():
    """mkernel/__init__ calls eager_loading_for_gdr before importing _native (which loads the
    extension and torch's CUDA pieces): CUDA reads the variable when it initializes."""
    tree = ast.parse((ROOT / "python" / "mkernel" / "__init__.py").read_text())
    order = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module is None:
            order += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            order.append(node.module)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            f = node.value.func
            if isinstance(f, ast.Attribute) and f.attr == "eager_loading_for_gdr":
                order.append("eager_loading_for_gdr()")
    assert "eager_loading_for_gdr()" in order and "_native" in order, order
    assert order.index("eager_loading_for_gdr()") < order.index("_native"), order


@pytest.mark.parametrize("gdr, user, want, copier", [("1", None, "EAGER", "thread"), ("1", "LAZY", "LAZY", "thread"),
                                                     ("0", None, "", "thread"), ("1", None, "", "process")])
def test_import_mkernel(gdr, user, want, copier):
    """The whole import, in a fresh process, as a rank of an emulated node starts it."""
    env = {k: v for k, v in os.environ.items() if k not in (ml.ENV, ml.GDR_ENV)}
    env[ml.GDR_ENV] = gdr
    env[ml.COPIER_ENV] = copier
    if user is not None:
        env[ml.ENV] = user
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", "import os, mkernel; print(os.environ.get('CUDA_MODULE_LOADING', ''))"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines and lines[-1].strip() == want, out.stdout
