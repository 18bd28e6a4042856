"""Mutation fuzz of the single-GPU ops' inputs: a valid call with one argument changed the way
callers get it wrong (a float32 or int tensor, a non-contiguous view, a storage offset off the
16-byte boundary, a missing or extra dim, one size that no longer matches, a tensor on the
other device, non-monotonic or out-of-range offs), drawn from the fuzz seed.

Pass: the op raises ValueError / TypeError / RuntimeError whose message names the op and the
changed argument, and the GPU is still usable afterwards (no sticky CUDA error, no fault); or,
where the change is one the op may take (a strided view, an offset, another float dtype), the
result equals the float64 reference of the changed inputs. A wrong result or a silently
accepted malformed call fails. Values the host cannot read without a sync (gemm_grouped's offs on
the GPU) are checked on the device, as PyTorch's index asserts are: a message naming the entry,
then a trap that ends the process's CUDA context; those calls run in a child process, which must
die saying so."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

import mkernel

from .conftest import DEVICE, SEED
from .problems import fuzz_count

# Mutations that may be accepted (the result must then be right) and those that must raise.
MAY_ACCEPT = ("float32", "strided", "offset")
MUST_RAISE = ("int32", "int64", "extra_dim", "missing_dim", "size", "device", "offs_order", "offs_range")


@dataclass(frozen=True)
class BadCall:
    op: str  # attention | gemm | grouped
    arg: str  # the argument changed
    mutation: str
    causal: bool

    @property
    def id(self) -> str:
        return f"{self.op}-{self.arg}-{self.mutation}{'-causal' if self.causal else ''}"


ARGS = {"attention": ("q", "k", "v"), "gemm": ("a", "b"), "grouped": ("a", "b", "offs")}


def bad_calls(seed: int, n: int) -> list[BadCall]:
    r = random.Random(f"bad-{seed}")
    out = []
    while len(out) < n:
        op = r.choice(tuple(ARGS))
        arg = r.choice(ARGS[op])
        if arg == "offs":  # offs is int32 already: int64 is its wrong dtype
            muts = ["extra_dim", "offs_order", "offs_range", "strided", "device", "int64"]
        else:
            muts = list(MAY_ACCEPT + ("int32", "extra_dim", "missing_dim", "size"))
            if DEVICE == "cuda":
                muts.append("device")
        out.append(BadCall(op, arg, r.choice(muts), r.random() < 0.5))
    return out


CALLS = bad_calls(SEED, fuzz_count(DEVICE, 60, 24))


def _mutate(x: torch.Tensor, mutation: str, gen: torch.Generator) -> torch.Tensor:
    if mutation == "float32":
        return x.float()
    if mutation == "int32":
        return x.to(torch.int32)
    if mutation == "int64":
        return x.to(torch.int64)
    if mutation == "strided":  # the same values in a view with a gap after every element
        wide = torch.empty(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)
        wide[..., ::2] = x
        return wide[..., ::2]
    if mutation == "offset":  # the same values one element past an aligned start
        buf = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
        view = buf[1:].view(x.shape)
        view.copy_(x)
        return view
    if mutation == "extra_dim":
        return x.unsqueeze(0)
    if mutation == "missing_dim":
        return x[0]
    if mutation == "size":  # the last dim 8 longer: no longer matches its partners
        return torch.cat([x, x[..., :8]], dim=-1)
    if mutation == "device":
        return x.cpu() if x.is_cuda else x
    raise ValueError(mutation)


def _valid(call: BadCall, gen: torch.Generator):
    dt = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    if call.op == "attention":
        q = torch.randn(2, 200, 4, 64, device=DEVICE, generator=gen).to(dt)
        k = torch.randn(2, 150, 2, 64, device=DEVICE, generator=gen).to(dt)
        v = torch.randn(2, 150, 2, 64, device=DEVICE, generator=gen).to(dt)
        return {"q": q, "k": k, "v": v}
    if call.op == "gemm":
        return {"a": torch.randn(100, 256, device=DEVICE, generator=gen).to(dt),
                "b": torch.randn(136, 256, device=DEVICE, generator=gen).to(dt)}
    counts = torch.tensor([30, 0, 70, 20], dtype=torch.int32)
    return {"a": torch.randn(120, 128, device=DEVICE, generator=gen).to(dt),
            "b": torch.randn(4, 64, 128, device=DEVICE, generator=gen).to(dt) / 8,
            "offs": torch.cumsum(counts, 0, dtype=torch.int32).to(DEVICE)}


def _run(call: BadCall, t: dict) -> torch.Tensor:
    if call.op == "attention":
        return mkernel.attention(t["q"], t["k"], t["v"], causal=call.causal)[0]
    if call.op == "gemm":
        return mkernel.gemm(t["a"], t["b"])
    return mkernel.gemm_grouped(t["a"], t["b"], offs=t["offs"])


def _reference(call: BadCall, t: dict) -> torch.Tensor:
    from tests.attention.reference import attention_ref
    if call.op == "attention":
        return attention_ref(t["q"], t["k"], t["v"], call.causal)[0]
    if call.op == "gemm":
        return t["a"].double() @ t["b"].double().T
    a, b, offs = t["a"].double(), t["b"].double(), t["offs"].tolist()
    out, start = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64, device=a.device), 0
    for e, end in enumerate(offs):
        out[start:end] = a[start:end] @ b[e].T
        start = end
    return out


def _inputs(idx: int) -> tuple[BadCall, dict]:
    call = CALLS[idx]
    gen = torch.Generator(device=DEVICE).manual_seed(SEED * 7 + idx)
    t = _valid(call, gen)
    if call.mutation == "offs_order":
        t["offs"] = t["offs"].flip(0).contiguous()
    elif call.mutation == "offs_range":
        t["offs"] = t["offs"] + 50
    else:
        t[call.arg] = _mutate(t[call.arg], call.mutation, gen)
    return call, t


DEVICE_CHECKED = ("offs_order", "offs_range")  # on CUDA: a device-side check, a trap


def child_call(idx: int) -> None:
    """The body of the child process of a device-checked call: the call, then a sync."""
    call, t = _inputs(idx)
    _run(call, t)
    torch.cuda.synchronize()


@pytest.mark.parametrize("idx", range(len(CALLS)), ids=[c.id for c in CALLS])
def test_bad_input_fuzz(idx: int) -> None:
    call = CALLS[idx]
    if call.mutation == "device" and DEVICE != "cuda":
        pytest.skip("one device only")
    if DEVICE == "cuda" and call.mutation in DEVICE_CHECKED:
        from tests.isolated import ROOT, trap_safe_env
        code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
                f"from tests.fuzz.test_fuzz_bad_inputs import child_call; child_call({idx})")
        with trap_safe_env({"MKERNEL_FUZZ_SEED": str(SEED),
                            "MKERNEL_FUZZ_CASES": str(len(CALLS))}) as env:
            r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                               text=True, timeout=120)
        out = r.stdout + r.stderr
        assert r.returncode != 0, f"{call.mutation} of offs ran to the end:\n{out[-2000:]}"
        assert re.search(r"mkernel\.gemm_grouped_packed: offs\[\d+\] = -?\d+ is", out), \
            f"the child did not die naming offs:\n{out[-3000:]}"
        return
    _, t = _inputs(idx)
    try:
        out = _run(call, t)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
    except (ValueError, TypeError, RuntimeError) as e:
        msg = str(e)
        assert not re.search(r"CUDA error|illegal|misaligned address|unspecified launch", msg), \
            f"a fault, not a refusal: {msg}"
        assert "mkernel" in msg, f"the message does not name the op: {msg}"
        assert re.search(rf"\b{call.arg}\b", msg), f"the message does not name {call.arg}: {msg}"
        if DEVICE == "cuda":  # the GPU is still usable: no sticky error, no fault
            torch.cuda.synchronize()
            assert torch.ones(4, device="cuda").sum().item() == 4.0
        return
    assert call.mutation in MAY_ACCEPT, f"{call.mutation} of {call.arg} silently accepted"
    ref = _reference(call, t)
    o = out.double()
    assert torch.isfinite(o).all(), "non-finite output"
    rel = ((o - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert rel < 1e-2, f"accepted {call.mutation} {call.arg}, but relative error {rel:.3g}"
