"""torch.library.opcheck on the ops' real kernels: CPU tensors (the host reference kernels, at
W = 1 in this process and W = 2 across two rank processes) and CUDA tensors (the GEMM engine).

Why not meta tensors: opcheck skips every check whose inputs are meta or fake tensors
(``torch.testing._internal.optests.generate_tests.is_abstract``): on meta tensors
``test_schema``, ``test_faketensor`` and ``test_aot_dispatch_dynamic`` return at once and check
nothing. Here each check calls a real kernel:

* ``test_schema``: the kernel mutates and aliases only what the schema declares;
* ``test_faketensor``: the Meta kernel's output shapes, strides and dtypes equal the real one's;
* ``test_aot_dispatch_dynamic``: the op under AOTAutograd with dynamic shapes gives the eager
  output;
* ``test_autograd_registration`` (inputs that require grad): the op has a kernel at an Autograd
  key, so a backward through it never silently yields no gradient. The fused linear ops register
  their backward (python/mkernel/autograd.py; with grad inputs ``test_aot_dispatch_dynamic`` also
  compares gradients); the GEMM engine ops register torch's NotImplemented fallback
  (csrc/autograd_not_implemented.cpp): their backward raises.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.library import opcheck
from torch.testing._internal.optests.generate_tests import OpCheckError

from mkernel.ops import GEMM_CONFIGS
from tests.launch import run_ranks

ROOT = Path(__file__).resolve().parents[2]
WORLD_ONE = 0  # the group handle the ops take at world size 1 (no session needed)
# The checks that run the op without gradients; test_autograd_registration runs on its own.
FORWARD_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
AUTOGRAD_UTILS = ("test_autograd_registration",)

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
requires_hopper = pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def linear_args(op: str, m: int, k: int, n: int, dtype, device="cpu", seed=0, grad=False):
    """(x [m, k], w [n, k], group, world_size[, return_gathered]) at world size one."""
    g = gen(seed)
    x = torch.randn(m, k, generator=g).to(device, dtype).requires_grad_(grad)
    w = torch.randn(n, k, generator=g).to(device, dtype).requires_grad_(grad)
    return (x, w, WORLD_ONE, 1, True) if op == "ag_gemm" else (x, w, WORLD_ONE, 1)


@torch.library.custom_op("mkernel_tests::wrong_fake", mutates_args=())
def _wrong_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_wrong_fake.register_fake
def _(x):
    return x.new_empty(x.shape[0] + 1)  # the bug: one row too many


def test_opcheck_checks_nothing_on_meta_tensors():
    """Why this file exists: the same broken op (its fake kernel's shape is wrong) passes opcheck
    on meta tensors and fails it on real ones."""
    opcheck(_wrong_fake, (torch.empty(3, device="meta"),), test_utils=FORWARD_UTILS)
    with pytest.raises(OpCheckError, match="test_faketensor"):
        opcheck(_wrong_fake, (torch.randn(3),), test_utils=FORWARD_UTILS)


# --- CPU, world size one: the host reference kernels ------------------------------------------

LINEAR_OPS = ["ag_gemm", "gemm_rs", "gemm_ar"]
# (m, k, n): ragged, a single row.
CPU_SHAPES = [(37, 64, 96), (1, 24, 8)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m, k, n", CPU_SHAPES)
@pytest.mark.parametrize("name", LINEAR_OPS)
def test_linear_ops_cpu_world_one(name, m, k, n, dtype):
    op = getattr(torch.ops.mkernel, name).default
    opcheck(op, linear_args(name, m, k, n, dtype, seed=m), test_utils=FORWARD_UTILS)


@pytest.mark.parametrize("name", LINEAR_OPS)
def test_linear_ops_with_gradients_cpu_world_one(name):
    """Inputs that require grad, every check: the op has an Autograd kernel
    (python/mkernel/autograd.py), and its backward under AOTAutograd gives eager's gradients."""
    op = getattr(torch.ops.mkernel, name).default
    opcheck(op, linear_args(name, 9, 16, 24, torch.float32, grad=True))


def engine_cases(device: str, dtype):
    """(op name, args) of every GEMM engine op with real inputs on `device`. Every output row is
    computed (no rows past counts / offs, whose contents are unspecified on CUDA)."""
    g = gen(7)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(device, dtype)

    counts = torch.tensor([40, 40, 40], dtype=torch.int32, device=device)
    offs = torch.tensor([20, 20, 72], dtype=torch.int32, device=device)  # an empty expert
    return [
        ("gemm", (r(37, 64), r(96, 64))),
        ("gemm", (r(200, 128), r(136, 128), 1, 0, 1, 2, 1, False)),  # explicit config and order
        ("gemm_grouped", (r(3, 40, 64), r(3, 48, 64), counts)),
        ("gemm_grouped_packed", (r(72, 64), r(3, 48, 64), offs)),
    ]


ENGINE_CPU = [pytest.param(name, args, id=f"{name}-{i}")
              for i, (name, args) in enumerate(engine_cases("cpu", torch.float32))]


@pytest.mark.parametrize("name, args", ENGINE_CPU)
def test_engine_ops_cpu(name, args):
    opcheck(getattr(torch.ops.mkernel, name).default, args, test_utils=FORWARD_UTILS)


@pytest.mark.parametrize("name, args", ENGINE_CPU)
def test_engine_ops_autograd_registration(name, args):
    """With inputs that require grad the outputs must carry the NotImplemented grad_fn of a
    registered Autograd kernel (backward raises), not autograd's silent fallback."""
    grad_args = tuple(a.detach().clone().requires_grad_(a.is_floating_point())
                      if isinstance(a, torch.Tensor) else a for a in args)
    op = getattr(torch.ops.mkernel, name).default
    opcheck(op, grad_args, test_utils=AUTOGRAD_UTILS)
    out = op(*grad_args)
    with pytest.raises(RuntimeError, match=rf"derivative for mkernel::{name} is not implemented"):
        out.sum().backward()


# --- CPU, world size two: the host reference kernels across two rank processes --------------

RANK_OPCHECK = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import torch, torch.distributed as dist
from torch.library import opcheck
import mkernel
torch.set_num_threads(1)
dist.init_process_group("gloo")
ctx = mkernel.init()
rank = ctx.rank
for dtype in (torch.float32, torch.bfloat16):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(6, 40, generator=g).to(dtype)     # 6 rows: divisible by W for gemm_rs
    w = torch.randn(24 + 8 * rank, 40, generator=g).to(dtype)
    wk = torch.randn(24, 40, generator=g).to(dtype)
    for name, args in (("ag_gemm", (x, w, ctx.handle, ctx.world_size, True)),
                       ("ag_gemm", (x, w, ctx.handle, ctx.world_size, False)),
                       ("gemm_rs", (x, wk, ctx.handle, ctx.world_size)),
                       ("gemm_ar", (x, wk, ctx.handle, ctx.world_size))):
        opcheck(getattr(torch.ops.mkernel, name).default, args,
                test_utils={FORWARD_UTILS!r})
        print("CHECKED", name, dtype, flush=True)
    # with gradients (fp32): the backward is a collective too (ag_gemm's dgrad a reduce-scatter)
    if dtype == torch.float32:
        for name, args in (("ag_gemm", (x.requires_grad_(), w.requires_grad_(), ctx.handle, ctx.world_size, True)),
                           ("gemm_rs", (x, wk.requires_grad_(), ctx.handle, ctx.world_size)),
                           ("gemm_ar", (x, wk, ctx.handle, ctx.world_size))):
            opcheck(getattr(torch.ops.mkernel, name).default, args)
            print("CHECKED-GRAD", name, flush=True)
ctx.barrier()
mkernel.shutdown()
dist.destroy_process_group()
print("OK", rank, flush=True)
"""


@pytest.mark.multiproc
def test_linear_ops_cpu_world_two():
    """Every check calls the op on both ranks in the same order, so each real call is a real
    two-rank collective through the host data path (with fp32 inputs that require grad, the
    backward's collectives too)."""
    res = run_ranks(RANK_OPCHECK, 2, nodes=1, timeout=240, fork=True)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}: rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        assert f"OK {r.rank}" in r.stdout, r.stdout[-2000:]
        assert r.stdout.count("CHECKED ") == 8 and r.stdout.count("CHECKED-GRAD") == 3, r.stdout[-2000:]


# --- CUDA: the GEMM engine ---------------------------------------------------------------------

@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_engine_ops_cuda(dtype):
    for name, args in engine_cases("cuda", dtype):
        opcheck(getattr(torch.ops.mkernel, name).default, args, test_utils=FORWARD_UTILS)


@requires_hopper
@pytest.mark.gpu
def test_gemm_hooked_cuda():
    """The hooked kernel with both flag arrays: the schema declares tile_done as written
    (Tensor(a!)?) and a_ready as read; the schema check proves the kernel writes nothing else."""
    g = gen(11)
    m, n, k = 256, 512, 128
    a = torch.randn(m, k, generator=g).to("cuda", torch.bfloat16)
    b = torch.randn(n, k, generator=g).to("cuda", torch.bfloat16)
    cfg = GEMM_CONFIGS["coop_128x128_c2x1"]  # the id from the generated table, never written here
    tiles_m, tiles_n, *_ = torch.ops.mkernel.gemm_tile_counts(cfg, m, n)
    a_ready = torch.ones(m // 128, dtype=torch.int64, device="cuda")  # released: no wait
    done = torch.zeros(tiles_m * tiles_n, dtype=torch.int64, device="cuda")
    args = (a, b, a_ready, 128, 1, done, 5, None, cfg, 0, 0, 0, 10.0, 0)
    opcheck(torch.ops.mkernel.gemm_hooked.default, args, test_utils=FORWARD_UTILS)
    grad_args = (a.clone().requires_grad_(), b.clone().requires_grad_(), *args[2:])
    opcheck(torch.ops.mkernel.gemm_hooked.default, grad_args, test_utils=AUTOGRAD_UTILS)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("name", LINEAR_OPS)
def test_linear_ops_cuda_world_one(name):
    """At world size one the fused ops run the engine (no communication)."""
    op = getattr(torch.ops.mkernel, name).default
    opcheck(op, linear_args(name, 130, 64, 256, torch.bfloat16, "cuda", seed=3),
            test_utils=FORWARD_UTILS)


# --- world one on CPU and on CUDA: the decode, attention and MoE ops ---------------------------

DEVICES = ["cpu", pytest.param("cuda", marks=[requires_hopper, pytest.mark.gpu])]


def world_one_cases(device: str) -> dict[str, tuple]:
    """op name -> args at world size one, in shapes every kernel takes (the CUDA
    attention engine: head dim 64; the MoE GEMMs: H and F multiples of 64), bf16, ragged rows.
    Every output element is computed (capacity 0: MoE rows packed, none unspecified)."""
    g = gen(13)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(device, torch.bfloat16)

    q, k, v = r(2, 37, 4, 64), r(2, 41, 2, 64), r(2, 41, 2, 64)  # GQA, s != s_kv
    tokens, choices, experts = 37, 2, 4
    x, w1 = r(tokens, 64), r(experts, 128, 64)
    idx = torch.rand(tokens, experts, generator=g).argsort(dim=1)[:, :choices]  # distinct experts
    idx = idx.contiguous().to(device)
    weights = torch.rand(tokens, choices, generator=g).to(device)
    dispatch = (x, idx, w1, WORLD_ONE, 1, experts, 0, False)
    y, _, route, recv_counts, _, _ = torch.ops.mkernel.moe_dispatch_gemm.default(*dispatch)
    return {
        "gemv": (r(5, 200), r(136, 200)),
        "attention": (q, k, v, True, None, 0, 0),
        "ring_attention": (q, k, v, WORLD_ONE, 1, True, 0.125),
        "moe_dispatch_gemm": dispatch,
        "moe_combine": (y, route, recv_counts, weights, WORLD_ONE, 1, tokens),
    }


WORLD_ONE_OPS = ["gemv", "attention", "ring_attention", "moe_dispatch_gemm", "moe_combine"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", WORLD_ONE_OPS)
def test_world_one_ops(name, device):
    """Schema, fake-vs-real and AOT dispatch on the real kernel of `device`; then, for an op with
    a backward, the autograd registration with inputs that require grad (gemv has none: it must
    carry the NotImplemented autograd kernel, so the check holds too)."""
    args = world_one_cases(device)[name]
    op = getattr(torch.ops.mkernel, name).default
    opcheck(op, args, test_utils=FORWARD_UTILS)
    grad_args = tuple(a.detach().clone().requires_grad_(a.is_floating_point())
                      if isinstance(a, torch.Tensor) else a for a in args)
    opcheck(op, grad_args, test_utils=AUTOGRAD_UTILS)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
