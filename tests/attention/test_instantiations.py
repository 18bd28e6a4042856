"""The generated attention instantiations (csrc/kernels/attention/instantiations/*.cu) are what
generate_instantiations.py writes from instances.inc: a tile added to instances.inc without
regenerating (or a hand edit of a generated file) fails here, on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ATTN = Path(__file__).resolve().parents[2] / "csrc" / "kernels" / "attention"


def test_instantiations_match_instances_inc(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gen_attn", ATTN / "generate_instantiations.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(tmp_path)
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.cu")}
    checked_in = {p.name: p.read_text() for p in (ATTN / "instantiations").glob("*.cu")}
    assert fresh, "instances.inc lists no case"
    assert sorted(fresh) == sorted(checked_in), "regenerate: python3 generate_instantiations.py"
    for name, text in fresh.items():
        assert checked_in[name] == text, f"{name} differs from what instances.inc generates"
    # The cluster tile (block_m 256) has no hooked kernel: its file must not call launch_case.
    for name, text in fresh.items():
        if "_m256_" in name:
            assert "launch_plain_case" in text and "launch_case<" not in text
