"""The GEMM config list has one source (generate_instantiations.py's CONFIGS): the C++ enum
(configs.inc), config_name, the instantiations and mkernel's GEMM_CONFIGS are generated from it
and must match what the generator writes today; a config name that does not exist is a
ValueError that lists the valid ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mkernel
from mkernel.ops import GEMM_CONFIGS

GENERATOR = Path(__file__).resolve().parents[2] / "csrc" / "kernels" / "gemm" / "generate_instantiations.py"


@pytest.mark.skipif(not GENERATOR.exists(), reason="needs the source tree (csrc/)")
def test_generated_files_match_the_config_table():
    r = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_config_ids_are_dense_and_auto_is_minus_one():
    ids = sorted(GEMM_CONFIGS.values())
    assert GEMM_CONFIGS["auto"] == -1
    assert ids == list(range(-1, len(GEMM_CONFIGS) - 1))


def test_unknown_config_is_a_value_error_naming_the_valid_ones():
    a = torch.randn(8, 16)
    with pytest.raises(ValueError, match="unknown GEMM config 'bogus'.*coop_128x256_c2x1") as e:
        mkernel.gemm(a, a, config="bogus")
    assert all(name in str(e.value) for name in GEMM_CONFIGS)
    offs = torch.tensor([4, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="unknown GEMM config 'nope'"):
        mkernel.gemm_grouped(a, torch.randn(2, 8, 16), offs=offs, config="nope")


def test_config_id_out_of_range_is_a_value_error():
    a = torch.randn(8, 16)
    n = len(GEMM_CONFIGS) - 1  # ids 0..n-1 (and -1 for auto)
    assert mkernel.gemm(a, a, config=n - 1).shape == (8, 8)
    for bad in (n, -2):
        with pytest.raises(ValueError, match=rf"config must be -1 \(by shape\) or a config id in \[0, {n}\)"):
            mkernel.gemm(a, a, config=bad)
