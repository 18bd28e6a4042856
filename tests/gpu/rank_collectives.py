"""What each rank process of tests/gpu/test_collectives.py runs: the collectives on the GPU
substrate against a torch reference built from every rank's inputs.

Every rank regenerates every rank's inputs from a shared seed (on the CPU, then copies its own
to the GPU), so each computes the reference itself: all_gather must be exact; reduce_scatter and
all_reduce must equal, bit for bit, the fp32 sum in rank order 0..W-1 rounded once (the kernel's
contract), and lie within the dtype's bound of the float64 sum; all_reduce's bits must be the same
on every rank (compared through gloo). Outputs are poisoned first (a NaN block of the output's
size is freed just before the call, so the caching allocator hands it to the op).

A rank prints ``CASE {json}`` per checked call, ``ERR {json}`` for an expected failure, and
``OK <rank>`` at the end. ``TEST_SUITE`` (comma-separated) picks: ``matrix``, ``back_to_back``,
``graph``, ``two_groups``, ``capture_growth``, ``multinode``, ``cached_memory``, ``mismatch``, ``kill`` (the last two end
the process).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import mkernel
from mkernel._module_loading import gdr_requested

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
BOUNDS = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 1e-3}
OPS = ("all_gather", "reduce_scatter", "all_reduce")


def emit(tag: str, payload: dict) -> None:
    sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
    sys.stdout.flush()


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    diff = (out.double().cpu() - ref).norm().item()
    norm = ref.norm().item()
    return diff / norm if norm > 0 else diff


def inputs(seed: int, world: int, shape: tuple[int, ...], dtype) -> list[torch.Tensor]:
    """Every rank's input of call `seed` (CPU tensors)."""
    out = []
    for r in range(world):
        g = torch.Generator().manual_seed(seed * 1009 + r)
        out.append(torch.randn(shape, generator=g, dtype=torch.float32).to(dtype))
    return out


def ordered_sum(xs: list[torch.Tensor]) -> torch.Tensor:
    """fp32 sum in rank order, rounded once to the inputs' dtype: the kernel's exact result."""
    acc = torch.zeros_like(xs[0], dtype=torch.float32)
    for x in xs:
        acc += x.float()
    return acc.to(xs[0].dtype)


def reference(op: str, xs: list[torch.Tensor], rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact expected output, float64 sum or gather) of `op` on rank `rank`."""
    world = len(xs)
    if op == "all_gather":
        cat = torch.cat(xs, 0)
        return cat, cat.double()
    if op == "all_reduce":
        return ordered_sum(xs), sum(x.double() for x in xs)
    b = xs[0].shape[0] // world
    blocks = [x[rank * b:(rank + 1) * b] for x in xs]
    return ordered_sum(blocks), sum(x.double() for x in blocks)


def poison(shape: tuple[int, ...], dtype, device) -> None:
    t = torch.full(shape, float("nan"), dtype=dtype, device=device)
    del t


def out_shape(op: str, shape: tuple[int, ...], world: int) -> tuple[int, ...]:
    if op == "all_gather":
        return (shape[0] * world, *shape[1:])
    if op == "reduce_scatter":
        return (shape[0] // world, *shape[1:])
    return shape


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


class Checker:
    def __init__(self, ctx, device):
        self.ctx, self.rank, self.world, self.device = ctx, ctx.rank, ctx.world_size, device
        self.calls = 0

    def check(self, op: str, out: torch.Tensor, xs: list[torch.Tensor], case: dict) -> None:
        exact, ref = reference(op, xs, self.rank)
        got = out.cpu()
        assert got.shape == exact.shape and got.dtype == exact.dtype, (case, got.shape, exact.shape)
        assert not torch.isnan(got.float()).any(), f"unwritten (poisoned) output: {case}"
        err = rel_err(got, ref)
        bound = BOUNDS[exact.dtype]
        assert err <= bound, f"{case}: rel err {err} > {bound}"
        if not torch.equal(got, exact):
            bad = (got != exact).nonzero()[:4].tolist()
            raise AssertionError(f"{case}: not the rank-ordered fp32 sum bit for bit at {bad}")
        if op == "all_reduce":  # identical bits on every rank
            mine = digest(got)
            every = [None] * self.world
            dist.all_gather_object(every, mine)
            assert len(set(every)) == 1, f"{case}: all_reduce differs across ranks: {every}"
        emit("CASE", dict(case, err=err, bound=bound))

    def run(self, op: str, dtype: str, shape: tuple[int, ...]) -> None:
        self.calls += 1
        dt = DTYPES[dtype]
        xs = inputs(self.calls, self.world, shape, dt)
        x = xs[self.rank].to(self.device)
        poison(out_shape(op, shape, self.world), dt, self.device)
        out = getattr(mkernel, op)(x, group=self.ctx)
        mkernel.synchronize()
        self.check(op, out, xs, {"op": op, "dtype": dtype, "shape": list(shape), "world": self.world})


def matrix(c: Checker) -> None:
    """Every op and dtype on ragged shapes: odd rows and columns, tiny, a single element per
    block, several chunks per block, and a size that grows the symmetric memory."""
    w = c.world
    shapes = [(w * 1, 1), (w * 3, 7), (w * 5, 33), (w * 37, 129), (w * 256, 1000), (w * 2048, 513)]
    for shape in shapes:
        for dtype in ("bf16", "fp16", "fp32"):
            for op in OPS:
                c.run(op, dtype, shape)


def back_to_back(c: Checker) -> None:
    """1000 calls with no host sync in between (the three ops in turn, inputs rotating over 5
    sets), then every output checked: the device-side call counter alone keeps them apart."""
    w, shape, dt = c.world, (c.world * 64, 129), torch.bfloat16
    sets = [inputs(900 + s, w, shape, dt) for s in range(5)]
    dev = [xs[c.rank].to(c.device) for xs in sets]
    outs = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(1000):
        op = OPS[i % 3]
        outs.append((op, i % 5, getattr(mkernel, op)(dev[i % 5], group=c.ctx)))
    mkernel.synchronize()
    dt_s = time.perf_counter() - t0
    for i, (op, s, out) in enumerate(outs):
        exact, _ = reference(op, sets[s], c.rank)
        assert torch.equal(out.cpu(), exact), f"back_to_back call {i} ({op}, set {s}) is wrong"
    sms = torch.cuda.get_device_properties(c.device).multi_processor_count
    emit("CASE", {"op": "back_to_back", "calls": 1000, "us_per_call": dt_s * 1e6 / 1000,
                  "sm_count": sms, "err": 0.0, "bound": 0.0})


def graph(c: Checker) -> None:
    """The three ops captured once in one CUDA graph, replayed 100 times; before every replay
    every rank writes new inputs into the captured input tensors (stream-ordered, no host sync);
    every replay's outputs are copied out and checked. Halfway, an eager call grows the group's
    symmetric memory: the later replays still run on the generation they captured."""
    w, shape, dt = c.world, (c.world * 48, 77), torch.float16
    c.ctx.reserve(1 << 22)
    x = torch.zeros(shape, dtype=dt, device=c.device)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on the capture stream (torch's recipe)
        for op in OPS:
            getattr(mkernel, op)(x, group=c.ctx)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [getattr(mkernel, op)(x, group=c.ctx) for op in OPS]
    sets = [inputs(2000 + i, w, shape, dt) for i in range(100)]
    staged = [xs[c.rank].to(c.device) for xs in sets]
    copies = []
    big = torch.ones((w * 2048, 1024), dtype=dt, device=c.device)  # 4 MiB per rank and more
    for i in range(100):
        x.copy_(staged[i])
        g.replay()
        copies.append([o.clone() for o in outs])
        if i == 50:  # grow the symmetric memory: the graph keeps the generation it captured
            grown = mkernel.all_reduce(big, group=c.ctx)
    mkernel.synchronize()
    assert torch.equal(grown, torch.full_like(big, float(w))), "the growing call is wrong"
    for i in range(100):
        for op, got in zip(OPS, copies[i]):
            exact, _ = reference(op, sets[i], c.rank)
            assert torch.equal(got.cpu(), exact), f"graph replay {i}: {op} is wrong"
    emit("CASE", {"op": "graph", "replays": 100, "err": 0.0, "bound": 0.0})


def multinode(c: Checker) -> None:
    """The group split into emulated nodes (MKERNEL_EMULATED_NODE): blocks of other nodes go
    through the GPU inter-node path (FIFO -> Go proxy -> transport). Every op and two dtypes on
    ragged shapes, then 60 calls without a host sync (the receive areas alternate by call
    parity). A build without the path prints NONET and stops."""
    try:
        c.run("all_gather", "bf16", (3, 7))
    except NotImplementedError as e:
        if "no GPU inter-node path" in str(e):
            print("NONET", flush=True)
            torch.cuda.synchronize()
            return
        raise
    w = c.world
    # (w * 523, 1024): per-rank blocks of 1.07 MB (bf16) / 2.1 MB (fp32) travel in 4 / 7 pieces
    # (the default parallel staging), the last one short.
    for shape in [(w * 3, 7), (w * 37, 129), (w * 256, 1000), (w * 523, 1024)]:
        for dtype in ("bf16", "fp32"):
            for op in OPS:
                c.run(op, dtype, shape)
    # More items than CTAs (16 MiB of bf16 per rank: hundreds of 64 KiB chunks per block): the
    # calls that deadlocked under MPS with a static item split (s13run1), and a growth of the
    # inter-node path well past its first size.
    for op in OPS:
        c.run(op, "bf16", (w * 4096, 2048))
    shape, dt = (w * 16, 33), torch.bfloat16
    sets = [inputs(4000 + s, w, shape, dt) for s in range(3)]
    dev = [xs[c.rank].to(c.device) for xs in sets]
    outs = [(OPS[i % 3], i % 3, getattr(mkernel, OPS[i % 3])(dev[i % 3], group=c.ctx)) for i in range(60)]
    mkernel.synchronize()
    for i, (op, s, out) in enumerate(outs):
        exact, _ = reference(op, sets[s], c.rank)
        assert torch.equal(out.cpu(), exact), f"multinode back-to-back call {i} ({op}) is wrong"
    # Every rank of this job is on one host: unless MKERNEL_NET picks one, the path must be
    # the loopback transport (shared memory), not tcp.
    info = json.loads(torch.ops.mkernel._net_path_info(c.ctx.handle, w))
    want = os.environ.get("MKERNEL_NET") or "loopback"
    assert info.get("transport") == want, f"the inter-node path runs on {info.get('transport')}, want {want}"
    # LL FIFO slots unless MKERNEL_FIFO_LL=0 opts out (the GPU pushes what the header says)
    fifo = info.get("stats", {}).get("fifo_format")
    want_fifo = "seq" if os.environ.get("MKERNEL_FIFO_LL") == "0" else "ll"
    assert fifo == want_fifo, f"the inter-node FIFO format is {fifo}, want {want_fifo}"
    # MKERNEL_NET_GDR=1 on loopback: GPU buffers the kernels use as over RDMA; the transport moves
    # each op's bytes with the extension's copy engine once the emulated link delivered them
    want_gdr = gdr_requested(os.environ) and want == "loopback"  # MKERNEL_NET_GDR, or its default
    assert info.get("gpu_direct", False) == want_gdr, f"gpu_direct is {info.get('gpu_direct')}, want {want_gdr}"
    assert info.get("gpu_memory", False) == want_gdr or want != "loopback", f"gpu_memory is {info.get('gpu_memory')}"
    emit("CASE", {"op": "multinode", "err": 0.0, "bound": 0.0, "net": info["transport"], "fifo": fifo,
                  "gdr": info.get("gpu_direct", False),
                  # CUDA's module loading ("eager" under MKERNEL_NET_GDR=1 with the in-process copier:
                  # mkernel's import sets it, python/mkernel/_module_loading.py)
                  "loading": info.get("module_loading", "?"),
                  # who submits the GPU-direct copies: "thread", "mkernel-gdr-copier" (the helper
                  # executable) or "python helper" (its fallback); "" without GPU-direct
                  "copier": info.get("copier", "?"),
                  "stage": os.environ.get("MKERNEL_NET_STAGE") or "parallel",
                  "overlap": os.environ.get("MKERNEL_NET_OVERLAP") or "0"})


def two_groups(c: Checker) -> None:
    """A second group over the same ranks, its calls interleaved with the first's (each group
    has its own memory and call counter), then closed (its memory released): the first group
    goes on working."""
    g2 = mkernel.init(dist.new_group(list(range(c.world))))
    shape, dt = (c.world * 40, 65), torch.bfloat16
    for i in range(6):
        ctx = c.ctx if i % 2 == 0 else g2
        xs = inputs(3000 + i, c.world, shape, dt)
        out = mkernel.all_reduce(xs[c.rank].to(c.device), group=ctx)
        mkernel.synchronize()
        exact, _ = reference("all_reduce", xs, c.rank)
        assert torch.equal(out.cpu(), exact), f"two_groups call {i} is wrong"
    g2.close()
    c.run("all_gather", "fp16", (3, 5))
    emit("CASE", {"op": "two_groups", "err": 0.0, "bound": 0.0})


def capture_growth(c: Checker) -> None:
    """A call that needs more symmetric memory than the group holds, inside capture: a clear
    error naming the size and Context.reserve, on every rank, and the group still works."""
    big = (c.world * 32768, 1024)  # 64 MiB per rank in fp16: beyond what the other suites grew (multinode: 16 MiB)
    x = torch.ones(big, dtype=torch.float16, device=c.device)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            mkernel.all_reduce(x, group=c.ctx)
    except RuntimeError as e:
        msg = str(e)
        assert "Context.reserve" in msg and "reserve(" in msg, msg
        assert "context was lost" not in msg, msg  # a refusal, not a dead context
        emit("ERR", {"suite": "capture_growth", "msg": msg.splitlines()[0][:400],
                     "names_reserve": True})
    else:
        raise AssertionError("capture of a growing call did not raise")
    torch.cuda.synchronize()
    c.run("all_reduce", "bf16", (c.world * 4, 9))  # still usable


def cached_memory(c: Checker) -> None:
    """The device full but for what torch's caching allocator holds freed: the group's symmetric
    memory must still come (the library gives torch's cache back before a cudaMalloc gives up;
    session 52's W = 8 ring test ran out there on an 80 GB H100). Run first in a fresh process:
    the call grows the group's memory past the 128 MiB it needs. The freed blocks are NaN bytes,
    so an output the op takes from the cache starts poisoned."""
    shape = (65536, 1024)  # fp16: 128 MiB per rank, 128 MiB x W gathered
    xs = inputs(4000, c.world, shape, torch.float16)
    x = xs[c.rank].to(c.device)
    dist.barrier()
    held = []
    for mib in (1024, 64, 4):  # what torch can hand out, in blocks the output fits in
        while True:
            try:
                held.append(torch.full((mib << 20,), 0xFF, dtype=torch.uint8, device=c.device))
            except torch.cuda.OutOfMemoryError:
                break
    torch.cuda.synchronize()
    dist.barrier()  # every rank holds its share
    free = torch.cuda.mem_get_info(c.device)[0]
    assert free < shape[0] * shape[1] * 2, (
        f"rank {c.rank}: {free >> 20} MiB still free after the fill: the case would not test the cache")
    cached = sum(t.numel() for t in held)
    del held  # to torch's cache, not to the device
    out = mkernel.all_gather(x, group=c.ctx)
    mkernel.synchronize()
    c.check("all_gather", out, xs, {"op": "all_gather", "dtype": "fp16", "shape": list(shape),
                                     "world": c.world, "suite": "cached_memory",
                                     "cached_mib": cached >> 20, "free_mib": free >> 20})
    del out
    torch.cuda.empty_cache()


def mismatch(c: Checker) -> None:
    """Rank 0 calls all_reduce with another shape than its peers: every rank's entry barrier
    sees the differing signature, records it and traps; the host raises MkernelError naming the
    peer. Ends the process (the CUDA context is lost)."""
    c.ctx.reserve(1 << 20)  # no growth: the signatures, not the sizes, must catch it
    cols = 16 if c.rank == 0 else 17
    x = torch.ones((c.world * 8, cols), dtype=torch.bfloat16, device=c.device)
    t0 = time.monotonic()
    try:
        mkernel.all_reduce(x, group=c.ctx)
        mkernel.synchronize()
    except Exception as e:  # noqa: BLE001  (the type is part of the record)
        emit("ERR", {"suite": "mismatch", "type": type(e).__name__, "s": time.monotonic() - t0,
                     "msg": str(e)[:600], "record": mkernel.last_wait_failure()})
        os._exit(0)
    raise AssertionError("mismatched shapes did not fail")


def kill(c: Checker) -> None:
    """After a few good calls the victim (last rank) launches an all_reduce and SIGKILLs itself
    while it runs; every other rank must raise within MKERNEL_OP_TIMEOUT (+ slack) naming a peer,
    not hang. Ends the process."""
    victim = c.world - 1
    for _ in range(3):
        c.run("all_reduce", "bf16", (c.world * 64, 64))
    x = torch.ones((c.world * 4096, 1024), dtype=torch.bfloat16, device=c.device)
    c.ctx.reserve(x.numel() * 2)
    dist.barrier()
    if c.rank == victim:
        mkernel.all_reduce(x, group=c.ctx)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(3):
            mkernel.all_reduce(x, group=c.ctx)
        mkernel.synchronize()
    except Exception as e:  # noqa: BLE001
        emit("ERR", {"suite": "kill", "type": type(e).__name__, "s": time.monotonic() - t0,
                     "msg": str(e)[:600], "record": mkernel.last_wait_failure()})
        os._exit(0)
    raise AssertionError("a call without the killed rank succeeded")


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    ctx = mkernel.init()
    c = Checker(ctx, device)
    for suite in os.environ.get("TEST_SUITE", "matrix").split(","):
        globals()[suite](c)
    torch.cuda.synchronize()
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", c.rank, c.calls, flush=True)


if __name__ == "__main__":
    main()
