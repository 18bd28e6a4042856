"""Random problems for the differential (fuzz) tests: each op's input space drawn from a seed.

A problem is a small frozen record; ``*_problems(seed, n, device)`` draws ``n`` of them, the same
list for the same arguments on every machine (Python's ``random.Random``, not torch's generator),
so a failure names a reproducible case: ``MKERNEL_FUZZ_SEED=<seed> pytest tests/fuzz -k <id>``.
The distributions lean on the edges where kernels break: lengths one off a tile (127, 129, 143,
145), a single row or key, empty experts, every head dim the op takes, GQA ratios, scales and
input magnitudes away from 1; sizes are capped so a float64 reference stays cheap (much smaller
on the CPU, where only the harness and the host paths are exercised).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass

# Lengths at a tile edge of the engines (128-row / 128- and 144-key blocks, 64-row GEMM tiles).
EDGE_LENGTHS = (1, 2, 63, 64, 65, 127, 128, 129, 143, 144, 145, 255, 256, 257, 333)


def fuzz_seed() -> int:
    """MKERNEL_FUZZ_SEED: an integer, or ``random`` for a fresh one (printed by the tests' header
    so that a failure can be replayed); unset: 0, the same cases on every run."""
    raw = os.environ.get("MKERNEL_FUZZ_SEED", "0")
    if raw == "random":
        return int(time.time() * 1000) % (1 << 31)
    return int(raw)


def fuzz_count(device: str, default_gpu: int, default_cpu: int) -> int:
    """MKERNEL_FUZZ_CASES cases per op (the device campaign raises it), else a default by device."""
    raw = os.environ.get("MKERNEL_FUZZ_CASES")
    if raw:
        return int(raw)
    return default_gpu if device == "cuda" else default_cpu


def rank_env(default_cases: int) -> dict[str, str]:
    """The environment of a multi-rank fuzz suite's ranks: FUZZ_SEED (drawn once here, so every
    rank gets the same one) and FUZZ_CASES (MKERNEL_FUZZ_CASES, else `default_cases`)."""
    return {"FUZZ_SEED": str(fuzz_seed()),
            "FUZZ_CASES": os.environ.get("MKERNEL_FUZZ_CASES", str(default_cases))}


def _length(r: random.Random, hi: int) -> int:
    """A sequence length in [1, hi]: a tile-edge length a quarter of the time, else log-uniform."""
    if r.random() < 0.25:
        edges = [x for x in EDGE_LENGTHS if x <= hi]
        return r.choice(edges)
    return max(1, min(hi, int(round(2 ** r.uniform(0, max(1.0, hi).bit_length())))))


def _mult8(r: random.Random, lo: int, hi: int) -> int:
    """A multiple of 8 in [lo, hi], log-uniform."""
    v = int(2 ** r.uniform(lo.bit_length() - 1, hi.bit_length()))
    return max(lo, min(hi, (v + 7) // 8 * 8))


@dataclass(frozen=True)
class AttentionProblem:
    """One mkernel.attention call: q [b, s, h, d], k/v [b, s_kv, h_kv, d]; ``amp`` scales the
    inputs (peaked or flat softmax), ``scale`` the scores (None: 1/sqrt(d)); ``lse_grad``: the
    loss reads lse too."""

    b: int
    s: int
    s_kv: int
    h: int
    h_kv: int
    d: int
    causal: bool
    dtype: str
    scale: float | None
    amp: float
    lse_grad: bool

    @property
    def id(self) -> str:
        sc = "" if self.scale is None else f"-sc{self.scale:.3g}"
        return (f"b{self.b}s{self.s}kv{self.s_kv}h{self.h}x{self.h_kv}d{self.d}"
                f"{'-causal' if self.causal else ''}-{self.dtype}-a{self.amp:g}{sc}"
                f"{'-lse' if self.lse_grad else ''}")


# Head dims: the engine's 64 / 128 mostly, the others (FA2's route) a fifth of the time.
ENGINE_DIMS = (64, 128)
OTHER_DIMS = (8, 32, 40, 80, 96, 160, 256)


def attention_problems(seed: int, n: int, device: str) -> list[AttentionProblem]:
    r = random.Random(f"attention-{seed}")
    gpu = device == "cuda"
    # Work caps (b * h * s * s_kv): the float64 reference's score tensor stays < ~0.5 GB.
    out = []
    while len(out) < n:
        long = gpu and r.random() < 0.15  # past the wide-KV / native-backward thresholds (4096)
        cap = (90_000_000 if long else 24_000_000) if gpu else 400_000
        s_hi, kv_hi = (9000, 9000) if long else ((2600, 3000) if gpu else (300, 300))
        s = _length(r, s_hi)
        s_kv = s if r.random() < 0.5 else _length(r, kv_hi)
        if long and r.random() < 0.7:
            s = s_kv = r.randint(4096, 9000)
        h_kv = r.choice((1, 1, 2, 4))
        h = h_kv * r.choice((1, 1, 2, 3, 4, 8))
        d = r.choice(ENGINE_DIMS) if r.random() < 0.8 else r.choice(OTHER_DIMS)
        if long:  # the native backward's rows (non-causal, d = 128, >= 4096 queries and keys)
            d = r.choice((64, 128, 128))
        b = r.choice((1, 1, 2, 3))
        while b * h * s * s_kv > cap and (b > 1 or h > 1):
            if b > 1:
                b -= 1
            else:
                h_kv = max(1, h_kv // 2)
                h = h_kv
        if b * h * s * s_kv > cap:
            continue
        out.append(AttentionProblem(
            b=b, s=s, s_kv=s_kv, h=h, h_kv=h_kv, d=d, causal=r.random() < 0.5,
            dtype=r.choice(("bf16", "fp16")) if gpu else r.choice(("fp32", "bf16")),
            scale=None if r.random() < 0.7 else round(r.uniform(0.02, 0.5), 4),
            amp=r.choice((1.0, 1.0, 1.0, 0.25, 2.0, 4.0)),
            lse_grad=r.random() < 0.25))
    return out


@dataclass(frozen=True)
class GemmProblem:
    """One mkernel.gemm call: a [m, k] @ b [n, k].T, with the options a caller may pass (config
    "auto" and no options is what most users run)."""

    m: int
    n: int
    k: int
    dtype: str
    config: str
    swizzle: int
    raster: str
    splits: int
    sm_count: int

    @property
    def id(self) -> str:
        opts = "".join(f"-{name}{v}" for name, v in (("sw", self.swizzle), ("r", self.raster),
                                                    ("k", self.splits), ("sm", self.sm_count))
                       if v not in (0, "auto"))
        return f"m{self.m}n{self.n}k{self.k}-{self.dtype}-{self.config}{opts}"


def gemm_problems(seed: int, n: int, device: str, configs: list[str]) -> list[GemmProblem]:
    r = random.Random(f"gemm-{seed}")
    gpu = device == "cuda"
    cap = 3e9 if gpu else 2e6  # m * n * k
    out = []
    while len(out) < n:
        band = r.random()
        if band < 0.2:
            m = r.randint(1, 16)  # the GEMV / decode rows
        elif band < 0.5:
            m = r.randint(17, 512) if r.random() < 0.8 else r.choice(EDGE_LENGTHS)
        else:
            m = _length(r, 5000 if gpu else 200)
        nn = _mult8(r, 8, 8192 if gpu else 256)
        k = _mult8(r, 8, 8192 if gpu else 256)
        if m * nn * k > cap:
            continue
        pinned = gpu and r.random() < 0.4
        config = r.choice([c for c in configs if c != "auto"]) if pinned else "auto"
        out.append(GemmProblem(
            m=m, n=nn, k=k, dtype=r.choice(("bf16", "fp16")) if gpu else "fp32", config=config,
            swizzle=r.choice((0, 1, 2, 4, 8)) if pinned else 0,
            raster=r.choice(("auto", "m", "n")) if pinned else "auto",
            splits=r.choice((0, 0, 1, 2, 3)) if pinned else 0,
            sm_count=r.choice((0, 0, 0, 66, 17)) if pinned else 0))
    return out


@dataclass(frozen=True)
class GroupedProblem:
    """One mkernel.gemm_grouped call: ``counts`` rows per expert (some empty), packed (offs) or
    capacity-padded (``capacity`` rows per expert), weights [experts, n, k]."""

    counts: tuple[int, ...]
    n: int
    k: int
    dtype: str
    packed: bool
    capacity: int
    config: str

    @property
    def id(self) -> str:
        layout = "packed" if self.packed else f"cap{self.capacity}"
        return (f"e{len(self.counts)}t{sum(self.counts)}n{self.n}k{self.k}-{self.dtype}-{layout}"
                f"-{self.config}")


GROUPED_CONFIGS = ("coop_128x256_c2x1", "coop_128x128_c2x1", "coop_128x256_c1x2",
                   "coop_256x128_c1x2", "ping_128x128_c1x2")


def grouped_problems(seed: int, n: int, device: str) -> list[GroupedProblem]:
    r = random.Random(f"grouped-{seed}")
    gpu = device == "cuda"
    out = []
    while len(out) < n:
        e = r.choice((1, 2, 3, 8, 16, 33)) if gpu else r.choice((1, 2, 3, 5))
        skew = r.random()
        counts = []
        for _ in range(e):
            if r.random() < 0.2:
                counts.append(0)  # an empty expert
            elif skew < 0.3:
                counts.append(_length(r, 2000 if gpu else 64))  # skewed: lengths all over
            else:
                counts.append(r.randint(1, 300 if gpu else 32))
        nn, k = _mult8(r, 8, 4096 if gpu else 128), _mult8(r, 8, 4096 if gpu else 128)
        if sum(counts) * nn * k > (2e9 if gpu else 2e6):
            continue
        packed = r.random() < 0.7
        out.append(GroupedProblem(
            counts=tuple(counts), n=nn, k=k, dtype=r.choice(("bf16", "fp16")) if gpu else "fp32",
            packed=packed, capacity=max(counts) + r.choice((0, 1, 37)) if counts else 1,
            config=r.choice(("auto",) * 3 + GROUPED_CONFIGS) if packed and gpu else "auto"))
    return out
