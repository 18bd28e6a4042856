"""What each rank process of tests/gpu/test_fused_ops.py runs: the fused ops on CUDA (W ranks
sharing one GPU under MPS) against a float32 reference (cuBLAS, no TF32) each rank computes
from every rank's inputs (seeded by (case, rank), so every rank regenerates the others').

Checks: relative error ‖out − ref‖/‖ref‖ and the worst 128×128 tile's max error against the
tensor's dtype resolution (an unwritten tile holds the poison and fails); outputs are fresh
tensors allocated from poisoned memory; back-to-back calls without a host sync; CUDA-graph
capture and replay with the inputs changed between replays. Prints ``CASE {json}`` per call and
``OK <rank>`` at the end; a failed check raises (exit status 1) naming the case.

``FUSED_SUITE`` (comma-separated): ``ag`` (ag_gemm), ``rs`` (gemm_rs), ``ar`` (gemm_ar),
``graph`` (all three captured and replayed), ``auto`` (the fused/unfused and config choice), ``time``,
``peertma`` (ag_gemm with MKERNEL_FUSED_AG_PEER_TMA=1), ``copyengine`` (ag_gemm with MKERNEL_FUSED_AG_COPY_ENGINE=1: the rows moved by the copy engines, then a graph), ``cekill`` (that route with a rank killed), ``rscopyengine`` / ``rscekill`` (gemm_rs with MKERNEL_FUSED_RS_COPY_ENGINE=1: per-owner GEMMs, the copy engines, a local reduce; then a graph; and with a rank killed), ``c1x1`` (the three ops with MKERNEL_FUSED_C1X1=1: the cluster-free 128x256 kernels, fused18), ``bigflags`` (gemm_ar two-shot at M = N ~ 16384: flag slots past the old 1 << 16-word region, issue 12), ``peergraph`` (that path captured and replayed), ``bucket`` (a shape reusing its M bucket's verdict), ``store`` (a verdict stored by an earlier process group, STORE_PHASE), ``agdefault`` (ag_gemm as users get it: no knob, the op's measured choice between the copy kernel, the peer-TMA kernel and the unfused path; then a graph of the cached verdict), ``mlp`` (mkernel.nn column -> GeLU -> row), ``compile`` / ``compile_aot`` (that MLP also under
torch.compile(fullgraph=True), inductor / aot_eager backend), ``fuzz`` (FUZZ_CASES random calls of
the three ops drawn from FUZZ_SEED: ragged and tile-edge M, K / N multiples of 8 from 8 to
thousands, both dtypes; the same draw on every rank).
The fused kernels are pinned (MKERNEL_FUSED=force) unless the environment says otherwise.
``FUSED_GRID=co_resident`` pins their persistent grid to the co-resident grid choose_path
offers under an MPS limit (3/4 of this rank's SMs in whole 2-CTA clusters: fused_common.h
co_resident_grid) through MKERNEL_FUSED_SMS, the same value on every rank.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sys
import time

import torch
import torch.distributed as dist

import mkernel

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
BOUND = 1e-2  # relative error of a bf16/fp16 GEMM output against fp64


def emit(tag: str, payload: dict) -> None:
    sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
    sys.stdout.flush()


def inputs(case: int, rank: int, rows: int, k: int, n: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s x [rows, k] and w [n, k] of case `case` (CPU, dtype)."""
    g = torch.Generator().manual_seed(case * 7919 + rank)
    x = torch.randn(rows, k, generator=g, dtype=torch.float64)
    w = torch.randn(n, k, generator=g, dtype=torch.float64) / math.sqrt(k)
    return x.to(dtype), w.to(dtype)


def poison(*shapes_dtypes) -> None:
    """Leave NaN-filled blocks of these sizes in the caching allocator, so the op's fresh outputs
    (same sizes) start as NaN: a tile the kernel never writes fails the check."""
    blocks = [torch.full(s, float("nan"), dtype=d, device="cuda") for s, d in shapes_dtypes]
    torch.cuda.synchronize()
    del blocks


def check(name: str, out: torch.Tensor, ref: torch.Tensor, case: dict) -> None:
    """Relative error and the worst tile's max error (scaled by the reference's magnitude)."""
    o, r = out.double(), ref.double().to(out.device)
    assert o.shape == r.shape, f"{name}: shape {tuple(o.shape)} != {tuple(r.shape)} ({case})"
    finite = bool(torch.isfinite(o).all())
    rel = ((o - r).norm() / r.norm().clamp_min(1e-30)).item() if finite else float("inf")
    scale = r.abs().max().item() if r.numel() else 1.0
    eps = torch.finfo(out.dtype).eps
    # The worst element of every tile (an unwritten or misplaced tile shows up here even when
    # the norm-wise error of a large output stays small).
    tile_worst = (o - r).abs().amax().item() if finite and r.numel() else (0.0 if finite else float("inf"))
    # A tile's worst element may be off by a few ulps of the largest output (bf16 output rounding
    # plus fp32 accumulation order); 16 ulps of the max is far below any missing or wrong tile.
    tile_ok = tile_worst <= 16 * eps * scale + 1e-6
    case = dict(case, out=name, rel=rel, tile_worst=tile_worst, scale=scale)
    emit("CASE", case)
    assert finite and rel <= BOUND and tile_ok, f"{name} wrong: {case}"


def ag_reference(case: int, world: int, m: int, k: int, n: int, dtype, me: int):
    xs = [inputs(case, s, m, k, n, dtype)[0] for s in range(world)]
    w = inputs(case, me, m, k, n, dtype)[1]
    gathered = torch.cat(xs)
    ref = gathered.cuda().float() @ w.cuda().float().T
    return gathered, ref, xs[me], w


def suite_ag(ctx, rank: int, world: int) -> None:
    # ragged m (not a tile multiple), one row, K/N multiples of 8, a shape wide enough for the
    # 128x256 tiles; back-to-back calls without a sync in between.
    shapes = [(37, 64, 96), (1, 128, 256), (200, 256, 136), (333, 512, 1024), (1024, 1024, 4096)]
    for dname, dtype in DTYPES.items():
        pending = []
        for i, (m, k, n) in enumerate(shapes):
            case = 1000 * i + (0 if dtype is torch.bfloat16 else 500)
            gathered_ref, ref, x, w = ag_reference(case, world, m, k, n, dtype, rank)
            poison(((world * m, n), dtype), ((world * m, k), dtype))
            out, gathered = mkernel.ag_gemm(x.cuda(), w.cuda(), group=ctx, return_gathered=True)
            out_only = mkernel.ag_gemm(x.cuda(), w.cuda(), group=ctx)
            pending.append((dict(op="ag_gemm", dtype=dname, m=m, k=k, n=n, world=world, rank=rank),
                            out, gathered, out_only, ref, gathered_ref))
        torch.cuda.synchronize()
        for c, out, gathered, out_only, ref, gathered_ref in pending:
            check("out", out, ref, c)
            check("out_only", out_only, ref, c)
            assert torch.equal(gathered.cpu(), gathered_ref), f"gathered differs: {c}"
            assert gathered.data_ptr() != out.data_ptr()


def route_calls(ctx, rank: int, world: int, var: str, shapes: list, case0: int, op: str,
                prefix: str, extra=lambda m: {}) -> None:
    """ag_gemm with the route knob `var`=1 against the fp32 reference, per shape and dtype: two
    calls back to back with no sync, a third with return_gathered=True (outputs per tile from
    poisoned memory, the gathered rows exactly), then `var`=0 (the copy kernel) for a same_bits
    record (informative: the measured config may differ). `var` is restored afterwards."""
    prev = os.environ.get(var)
    try:
        for dname, dtype in DTYPES.items():
            pending = []
            for i, (m, k, n) in enumerate(shapes):
                case = case0 + 1000 * i + (0 if dtype is torch.bfloat16 else 500)
                gathered_ref, ref, x, w = ag_reference(case, world, m, k, n, dtype, rank)
                xd, wd = x.cuda(), w.cuda()
                os.environ[var] = "1"
                poison(((world * m, n), dtype), ((world * m, k), dtype))
                out1 = mkernel.ag_gemm(xd, wd, group=ctx)
                out2 = mkernel.ag_gemm(xd, wd, group=ctx)  # no sync in between
                out_g, gathered = mkernel.ag_gemm(xd, wd, group=ctx, return_gathered=True)
                os.environ[var] = "0"  # the copy path
                out_copy = mkernel.ag_gemm(xd, wd, group=ctx)
                c = dict(op=op, dtype=dname, m=m, k=k, n=n, world=world, rank=rank, **extra(m))
                pending.append((c, out1, out2, out_g, gathered, out_copy, ref, gathered_ref))
            torch.cuda.synchronize()
            for c, out1, out2, out_g, gathered, out_copy, ref, gathered_ref in pending:
                check(f"{prefix}_out", out1, ref, c)
                check(f"{prefix}_out_again", out2, ref, c)
                check(f"{prefix}_gathered_out", out_g, ref, c)
                assert torch.equal(gathered.cpu(), gathered_ref), f"gathered differs: {c}"
                emit("CASE", dict(c, same_bits=bool(torch.equal(out1, out_copy))))
    finally:
        if prev is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = prev


def suite_peertma(ctx, rank: int, world: int) -> None:
    """ag_gemm with MKERNEL_FUSED_AG_PEER_TMA=1 (fused13; a measured candidate by default since
    fused16, pinned here so the suite tests the kernel whatever the verdict): the GEMM loads the peers' rows by TMA
    from their own slots (m a multiple of 128), ragged m and return_gathered=True take the copy
    path under the same knob; every output against the fp32 reference (per tile), two calls per
    shape back to back (the own slot rewritten in the next call), and the peer kernel's output
    compared with the copy path's (=0; CASE field same_bits: informative, the measured config may
    differ). fused_smoke.py checks that the peer kernel really launched (its stderr line)."""
    shapes = [(128, 64, 96), (256, 256, 136), (384, 512, 1024), (1024, 1024, 4096),
              (333, 512, 1024)]  # the last: ragged, the copy path
    route_calls(ctx, rank, world, "MKERNEL_FUSED_AG_PEER_TMA", shapes, 3000, "ag_gemm_peertma",
                "peer", extra=lambda m: dict(peer=(m % 128 == 0)))


def suite_agdefault(ctx, rank: int, world: int) -> None:
    """ag_gemm as users get it (fused16): MKERNEL_FUSED_AG_PEER_TMA unset (auto), the op's own
    choice (choose_path, not forced). Where the peer-TMA kernel fits (m % 128 == 0, no
    return_gathered) the shape's first call measures the copy kernel, the peer-TMA kernel and the
    unfused path on every rank and the group keeps the fastest (the peer kernel launches at least
    there: test_fused_ops.py checks its line and that every rank printed the same verdicts); the
    copy path for ragged m and return_gathered=True. Every output against the fp32 reference per
    tile, from poisoned memory; two calls back to back with no sync (the own slot restaged while a
    peer may still read the previous call's). Then a CUDA graph of a measured shape with the
    fused kernel pinned (MKERNEL_FUSED=force: its verdict is the fastest fused route of the same
    measurement, copy or peer-TMA) captured and replayed with every rank's x changed: the capture
    must run the cached verdict (its MKERNEL_FUSED_VERBOSE line, checked by the test)."""
    shapes = [(256, 256, 512), (1024, 1024, 4096), (512, 2048, 1024), (333, 512, 1024)]
    saved = {v: os.environ.pop(v, None) for v in ("MKERNEL_FUSED_AG_PEER_TMA", "MKERNEL_FUSED")}
    try:
        for dname, dtype in DTYPES.items():
            pending = []
            for i, (m, k, n) in enumerate(shapes):
                case = 9000 + 1000 * i + (0 if dtype is torch.bfloat16 else 500)
                gathered_ref, ref, x, w = ag_reference(case, world, m, k, n, dtype, rank)
                xd, wd = x.cuda(), w.cuda()
                poison(((world * m, n), dtype), ((world * m, k), dtype))
                out1 = mkernel.ag_gemm(xd, wd, group=ctx)
                out2 = mkernel.ag_gemm(xd, wd, group=ctx)  # no sync in between
                out_g, gathered = mkernel.ag_gemm(xd, wd, group=ctx, return_gathered=True)
                c = dict(op="ag_gemm_default", dtype=dname, m=m, k=k, n=n, world=world, rank=rank)
                pending.append((c, out1, out2, out_g, gathered, ref, gathered_ref))
            torch.cuda.synchronize()
            for c, out1, out2, out_g, gathered, ref, gathered_ref in pending:
                check("default_out", out1, ref, c)
                check("default_out_again", out2, ref, c)
                check("default_gathered_out", out_g, ref, c)
                assert torch.equal(gathered.cpu(), gathered_ref), f"gathered differs: {c}"
        # The graph: shape (1024, 1024, 4096) bf16, measured above under auto (same key).
        m, k, n, dtype = 1024, 1024, 4096, torch.bfloat16
        os.environ["MKERNEL_FUSED"] = "force"
        _, _, x0, w = ag_reference(9100, world, m, k, n, dtype, rank)
        x_static = x0.cuda()
        w_dev = w.cuda()
        mkernel.ag_gemm(x_static, w_dev, group=ctx)  # the cached fused verdict, eagerly
        torch.cuda.synchronize()
        replay_ag_graph(ctx, rank, world, x_static, w_dev, (9101, 9102), "default_graph_out",
                        dict(op="ag_gemm_default", world=world))
    finally:
        os.environ.pop("MKERNEL_FUSED", None)
        for v, val in saved.items():
            if val is not None:
                os.environ[v] = val


# suite "bucket" (session 54): (op, first M, M of the same bucket reusing its verdict, an M measured
# on its own with MKERNEL_FUSED_BUCKET=0). ag_gemm's M is each rank's rows (multiples of 128: the
# peer-TMA route fits all four, so the candidate list is the same); gemm_rs's the total (multiples
# of 8: of W). N = 4096 keeps the 128x256 config at every M here (fused_dispatch.cu fused_config:
# >= 80 tiles against a share of at most 66 SMs).
BUCKET_CASES = [("ag_gemm", 1024, (768, 896), 640, 1024), ("gemm_rs", 2048, (1536, 1792), 1280, 512)]
BUCKET_N = 4096


def bucket_case(ctx, rank: int, world: int, i: int, j: int, m: int) -> None:
    """One call of BUCKET_CASES[i]'s op at M = m (case seed by i, j), checked per tile against
    the fp32 reference from poisoned memory."""
    op, _, _, _, k = BUCKET_CASES[i]
    dtype = torch.bfloat16
    case = 12000 + 100 * i + j
    c = dict(op=f"{op}_bucket", dtype="bf16", m=m, k=k, n=BUCKET_N, world=world, rank=rank)
    if op == "ag_gemm":
        _, ref, x, w = ag_reference(case, world, m, k, BUCKET_N, dtype, rank)
        poison(((world * m, BUCKET_N), dtype))
        out = mkernel.ag_gemm(x.cuda(), w.cuda(), group=ctx)
    else:
        total, x, w = reduce_reference(case, world, m, k, BUCKET_N, dtype, rank)
        b = m // world
        ref = total[rank * b:(rank + 1) * b]
        poison((tuple(ref.shape), dtype))
        out = mkernel.gemm_rs(x.cuda(), w.cuda(), group=ctx)
    torch.cuda.synchronize()
    check("bucket_out", out, ref, c)


def suite_bucket(ctx, rank: int, world: int) -> None:
    """A shape reuses the verdict its M bucket's first shape measured (choose_path, session 54):
    per op, the first M is measured, two more M of its bucket (same N, K, candidate paths) run its
    verdict with no measurement, and one more with MKERNEL_FUSED_BUCKET=0 is measured on its own;
    every output against the fp32 reference per tile, from poisoned memory. The op's own choice
    (MKERNEL_FUSED unset); test_fused_ops.py reads the MKERNEL_FUSED_VERBOSE lines."""
    saved = {v: os.environ.pop(v, None) for v in ("MKERNEL_FUSED", "MKERNEL_FUSED_BUCKET")}
    try:
        for i, (op, m0, reused, own, k) in enumerate(BUCKET_CASES):
            for j, m in enumerate((m0, *reused, own)):
                if m == own:
                    os.environ["MKERNEL_FUSED_BUCKET"] = "0"
                bucket_case(ctx, rank, world, i, j, m)
            os.environ.pop("MKERNEL_FUSED_BUCKET", None)
    finally:
        restore_env(saved)


def suite_store(ctx, rank: int, world: int) -> None:
    """The verdict cache across processes (session 55, fused_verdict_store.h), one phase per
    process group (STORE_PHASE): "first" measures each BUCKET_CASES op at its first M and stores
    the verdict; "second" (a new group on the same cache directory) runs another M of the bucket
    on the stored verdict with no measurement; "split" gives the ranks but 0 an empty directory:
    they find nothing, so the group measures again (the ranks agree before using a stored
    verdict). Every output per tile against fp32; test_fused_ops.py reads the verbose lines."""
    phase = os.environ["STORE_PHASE"]
    if phase == "split" and rank > 0:
        os.environ["MKERNEL_CACHE_DIR"] += f"-empty-{rank}"
    saved = {v: os.environ.pop(v, None) for v in ("MKERNEL_FUSED", "MKERNEL_FUSED_BUCKET")}
    try:
        for i, (_, m0, reused, _, _) in enumerate(BUCKET_CASES):
            j = {"first": 0, "second": 1, "split": 2}[phase]
            bucket_case(ctx, rank, world, i, j, (m0, *reused)[j])
    finally:
        restore_env(saved)


def replay_ag_graph(ctx, rank: int, world: int, x_static: torch.Tensor, w_dev: torch.Tensor,
                    cases: tuple[int, ...], name: str, info: dict) -> None:
    """Captures one ag_gemm(x_static, w_dev) in a CUDA graph, then per case writes that case's x
    into x_static on every rank, poisons the captured output, replays and checks it against the
    float32 reference of every rank's x (inputs(case, ...), the same shape and dtype as x_static)."""
    m, k = x_static.shape
    n = w_dev.shape[0]
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            out_static = mkernel.ag_gemm(x_static, w_dev, group=ctx)
    for case in cases:
        xs = [inputs(case, s, m, k, n, x_static.dtype)[0] for s in range(world)]
        ref = torch.cat(xs).cuda().float() @ w_dev.float().T
        x_static.copy_(xs[rank].cuda())
        out_static.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(name, out_static, ref, dict(info, graph=True, case=case, rank=rank))


def suite_peergraph(ctx, rank: int, world: int) -> None:
    """One ag_gemm on the peer-TMA path captured in a CUDA graph and replayed with new x on every
    rank (the descriptors name x's and the peers' slots' fixed addresses; the own slot is
    restaged by every replay after its entry barrier)."""
    m, k, n, dtype = 256, 256, 512, torch.bfloat16
    prev = os.environ.get("MKERNEL_FUSED_AG_PEER_TMA")
    os.environ["MKERNEL_FUSED_AG_PEER_TMA"] = "1"
    try:
        x_static = torch.empty(m, k, dtype=dtype, device="cuda")
        _, _, x0, w = ag_reference(31, world, m, k, n, dtype, rank)
        x_static.copy_(x0)
        w_dev = w.cuda()
        mkernel.ag_gemm(x_static, w_dev, group=ctx)  # measured, order cached, buffer sized
        torch.cuda.synchronize()
        replay_ag_graph(ctx, rank, world, x_static, w_dev, (32, 33), "peer_graph_out",
                        dict(op="ag_gemm_peertma"))
    finally:
        if prev is None:
            os.environ.pop("MKERNEL_FUSED_AG_PEER_TMA", None)
        else:
            os.environ["MKERNEL_FUSED_AG_PEER_TMA"] = prev


def mlp_alternating(ctx, rank: int, world: int, case: int, name: str, op: str,
                    before_rs=lambda i: None) -> None:
    """fc1 / fc2 of a tensor-parallel MLP: six ag_gemm and six gemm_rs calls alternating with no
    sync (`before_rs(i)` runs before the i-th gemm_rs: a knob to flip), every output checked
    per tile against the fp32 reference afterwards (cases `case`, `case` + 1)."""
    m, k, n, dtype = 512, 512, 1024, torch.bfloat16
    _, ag_ref, xa, wa = ag_reference(case, world, m, k, n, dtype, rank)
    rows = 256 * world
    total, xr, wr = reduce_reference(case + 1, world, rows, 1024, 512, dtype, rank)
    b = rows // world
    xa, wa, xr, wr = xa.cuda(), wa.cuda(), xr.cuda(), wr.cuda()
    pending = []
    for i in range(6):
        pending.append((f"{name}_ag_out", mkernel.ag_gemm(xa, wa, group=ctx), ag_ref))
        before_rs(i)
        pending.append((f"{name}_rs_out", mkernel.gemm_rs(xr, wr, group=ctx),
                        total[rank * b:(rank + 1) * b]))
    torch.cuda.synchronize()
    for out_name, out, ref in pending:
        check(out_name, out, ref, dict(op=op, world=world, rank=rank))


def suite_copyengine(ctx, rank: int, world: int) -> None:
    """ag_gemm with MKERNEL_FUSED_AG_COPY_ENGINE=1 (session 27, opt-in): the rows move by the
    copy engines on side streams, the copy kernel's GEMM waits for their flags (set to 1 after
    the launch gate reset them). Ragged m (a 128-row flag chunk straddling the source's end, one
    row, m < 128), return_gathered, three calls per shape back to back with no sync (the gate's
    reset and the next call's copies racing a slow peer's kernel would show here), every output
    against the fp32 reference per tile from poisoned memory, and a same_bits record against the
    copy kernel (=0; informative: the measured config may differ). Then the route alternating
    with gemm_rs (six of each, no sync: the gate's reset beside gemm_rs's tile flags). Then a
    CUDA graph: inside capture the route runs its plan on the copy kernel; its replays with
    changed x must be right.
    test_fused_ops.py checks that the route launched on every rank (its stderr line)."""
    shapes = [(37, 64, 96), (1, 128, 256), (200, 256, 136), (333, 512, 1024), (1024, 1024, 4096),
              (1280, 2048, 512)]
    route_calls(ctx, rank, world, "MKERNEL_FUSED_AG_COPY_ENGINE", shapes, 21000,
                "ag_gemm_copyengine", "ce")
    prev = os.environ.get("MKERNEL_FUSED_AG_COPY_ENGINE")
    try:
        # fc1 / fc2 of a tensor-parallel MLP: the route's calls and gemm_rs alternating with no
        # sync. The route's gate resets flag slots of the op range, where gemm_rs keeps the tile
        # flags a lagging peer polls at this rank until its own gemm_rs ends (fused_gate.cu
        # "Reset": the reset waits for every peer's exit; a reset before it trapped that peer).
        os.environ["MKERNEL_FUSED_AG_COPY_ENGINE"] = "1"
        mlp_alternating(ctx, rank, world, 21800, "ce_mlp", "ag_gemm_copyengine+gemm_rs")
        # The graph (the route's plan on the copy kernel inside capture), then eager calls again.
        m, k, n, dtype = 256, 256, 512, torch.bfloat16
        os.environ["MKERNEL_FUSED_AG_COPY_ENGINE"] = "1"
        x_static = torch.empty(m, k, dtype=dtype, device="cuda")
        _, _, x0, w = ag_reference(21900, world, m, k, n, dtype, rank)
        x_static.copy_(x0)
        w_dev = w.cuda()
        mkernel.ag_gemm(x_static, w_dev, group=ctx)  # eager on the route: measured, sized
        torch.cuda.synchronize()
        replay_ag_graph(ctx, rank, world, x_static, w_dev, (21901, 21902), "ce_graph_out",
                        dict(op="ag_gemm_copyengine"))
        # ag_reference draws w from the case too: the eager call takes this case's w (session 29:
        # it took the graph's, and its reference was another product, rel = sqrt(2)).
        _, ref, x, w_eager = ag_reference(21903, world, m, k, n, dtype, rank)
        poison(((world * m, n), dtype))
        out = mkernel.ag_gemm(x.cuda(), w_eager.cuda(), group=ctx)  # eager after the graph's copy kernel
        torch.cuda.synchronize()
        check("ce_after_graph_out", out, ref, dict(op="ag_gemm_copyengine", world=world, rank=rank))
    finally:
        if prev is None:
            os.environ.pop("MKERNEL_FUSED_AG_COPY_ENGINE", None)
        else:
            os.environ["MKERNEL_FUSED_AG_COPY_ENGINE"] = prev


def killed_rank_calls(ctx, rank: int, world: int, suite: str, call) -> None:
    """A route with a dead peer: `call()` (one op call on the route) three times to measure and
    size, then the last rank SIGKILLs itself right after one more; every other rank's next calls
    must raise within the op timeout (MKERNEL_OP_TIMEOUT) — the launch gate's barrier waiting for
    the dead rank's gate (kWaitPeerGate), an entry barrier or a flag wait (kWaitPeerFlag) — naming
    it, never hang. Prints ``ERR {json}`` and exits 0."""
    victim = world - 1
    for _ in range(3):  # measured and sized: the kill call grows nothing (no host collective)
        call()
    torch.cuda.synchronize()
    dist.barrier()
    if rank == victim:
        call()
        torch.cuda.synchronize()
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(3):
            call()
        mkernel.synchronize()
    except Exception as e:  # noqa: BLE001
        emit("ERR", {"suite": suite, "type": type(e).__name__, "s": time.monotonic() - t0,
                     "msg": str(e)[:600], "record": mkernel.last_wait_failure()})
        os._exit(0)
    raise AssertionError(f"{suite}: a call without the killed rank succeeded")


def suite_cekill(ctx, rank: int, world: int) -> None:
    """ag_gemm's copy-engine route with a dead peer (killed_rank_calls)."""
    os.environ["MKERNEL_FUSED_AG_COPY_ENGINE"] = "1"
    _, _, x, w = ag_reference(23000, world, 1024, 1024, 2048, torch.bfloat16, rank)
    x, w = x.cuda(), w.cuda()
    killed_rank_calls(ctx, rank, world, "cekill", lambda: mkernel.ag_gemm(x, w, group=ctx))


def suite_rscopyengine(ctx, rank: int, world: int) -> None:
    """gemm_rs with MKERNEL_FUSED_RS_COPY_ENGINE=1 (session 59, opt-in): per-owner engine GEMMs
    whose partials the copy engines move into the owners' slots, then a reduce of local memory
    (fused_copy_engine.h RsCopyEngine). REDUCE_SHAPES (one row per rank up, K / N multiples of 8)
    in both dtypes, three calls per shape back to back with no sync (the launch gate's reset and
    the next call's copies racing a slow peer's reduce would show here), every output per tile
    against the fp32 reference from poisoned memory, and a same_bits record against the fused
    kernel (=0; informative: the engine's block GEMMs may take another config). Then the route
    alternating with ag_gemm and with gemm_rs on the fused kernel (no sync: the route's gate
    resets flags in the op range the fused kernels' tile flags share). Then a CUDA graph: inside
    capture the route's plan runs on the fused kernel; its replays with changed x must be right,
    and an eager call after it. test_fused_ops.py checks that the route launched on every rank."""
    var = "MKERNEL_FUSED_RS_COPY_ENGINE"
    saved = {var: os.environ.get(var)}
    try:
        for dname, dtype in DTYPES.items():
            pending = []
            for i, (rows, k, n) in enumerate(REDUCE_SHAPES):
                rows = (rows + world - 1) // world * world
                case = 26000 + 1000 * i + (0 if dtype is torch.bfloat16 else 500)
                total, x, w = reduce_reference(case, world, rows, k, n, dtype, rank)
                b = rows // world
                ref = total[rank * b:(rank + 1) * b]
                xd, wd = x.cuda(), w.cuda()
                c = dict(op="gemm_rs_copyengine", dtype=dname, m=rows, k=k, n=n, world=world, rank=rank)
                os.environ[var] = "1"
                poison((tuple(ref.shape), dtype))
                outs = [mkernel.gemm_rs(xd, wd, group=ctx) for _ in range(3)]  # no sync between
                os.environ[var] = "0"
                fused = mkernel.gemm_rs(xd, wd, group=ctx)
                pending.append((c, outs, fused, ref))
            torch.cuda.synchronize()
            for c, outs, fused, ref in pending:
                for j, out in enumerate(outs):
                    check(f"rsce_out{j}", out, ref, c)
                check("rs_fused_out", fused, ref, c)
                emit("CASE", dict(c, out="same_bits", same_bits=bool(torch.equal(outs[0], fused))))
        # fc1 / fc2 of a tensor-parallel MLP, gemm_rs on the route and on the fused kernel in turn.
        mlp_alternating(ctx, rank, world, 26800, "rsce_mlp", "gemm_rs_copyengine+ag_gemm",
                        before_rs=lambda i: os.environ.__setitem__(var, "1" if i % 2 == 0 else "0"))
        # The graph (the route's plan on the fused kernel inside capture), then an eager call.
        os.environ[var] = "1"
        rows, k, n, dtype = 128 * world, 256, 512, torch.bfloat16
        b = rows // world
        _, x0, w = reduce_reference(26900, world, rows, k, n, dtype, rank)
        x_static, w_dev = x0.cuda(), w.cuda()
        mkernel.gemm_rs(x_static, w_dev, group=ctx)  # eager on the route: measured, sized
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph, stream=stream):
                out_static = mkernel.gemm_rs(x_static, w_dev, group=ctx)
        for case in (26901, 26902):
            # Every rank's x of this case (w stays the graph's: the reference uses it).
            xs = [inputs(case, s, rows, k, n, dtype)[0] for s in range(world)]
            ws = [inputs(26900, s, rows, k, n, dtype)[1] for s in range(world)]
            ref = sum(xs[s].cuda().float() @ ws[s].cuda().float().T for s in range(world))
            x_static.copy_(xs[rank].cuda())
            out_static.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            check("rsce_graph_out", out_static, ref[rank * b:(rank + 1) * b],
                  dict(op="gemm_rs_copyengine", graph=True, case=case, world=world, rank=rank))
        total, x, w_eager = reduce_reference(26903, world, rows, k, n, dtype, rank)
        poison(((b, n), dtype))
        out = mkernel.gemm_rs(x.cuda(), w_eager.cuda(), group=ctx)  # eager after the graph
        torch.cuda.synchronize()
        check("rsce_after_graph_out", out, total[rank * b:(rank + 1) * b],
              dict(op="gemm_rs_copyengine", world=world, rank=rank))
    finally:
        restore_env(saved)


def suite_rscekill(ctx, rank: int, world: int) -> None:
    """gemm_rs's copy-engine route with a dead peer (killed_rank_calls): the gate's barrier, the
    route's entry barrier or the reduce's flag wait names it."""
    os.environ["MKERNEL_FUSED_RS_COPY_ENGINE"] = "1"
    _, x, w = reduce_reference(27000, world, 256 * world, 1024, 2048, torch.bfloat16, rank)
    x, w = x.cuda(), w.cuda()
    killed_rank_calls(ctx, rank, world, "rscekill", lambda: mkernel.gemm_rs(x, w, group=ctx))


def reduce_reference(case: int, world: int, rows: int, k: int, n: int, dtype, me: int):
    """Every rank's x @ w.T partial summed in float32 on the GPU ([rows, n]), this rank's inputs."""
    total = None
    for s in range(world):
        x, w = inputs(case, s, rows, k, n, dtype)
        part = x.cuda().float() @ w.cuda().float().T
        total = part if total is None else total + part
    x, w = inputs(case, me, rows, k, n, dtype)
    return total, x, w


# (M, k, N): ragged M (a multiple of W only for gemm_rs), k and N multiples of 8.
REDUCE_SHAPES = [(8, 64, 96), (136, 64, 200), (520, 256, 136), (1000, 512, 1024), (2048, 512, 4096)]


def suite_reduce(ctx, rank: int, world: int, op: str) -> None:
    fn = {"gemm_rs": mkernel.gemm_rs, "gemm_ar": mkernel.gemm_ar}[op]
    for dname, dtype in DTYPES.items():
        pending = []
        for i, (rows, k, n) in enumerate(REDUCE_SHAPES):
            if op == "gemm_rs":
                rows = (rows + world - 1) // world * world
            case = 1000 * i + (0 if dtype is torch.bfloat16 else 500) + (100 if op == "gemm_rs" else 0)
            total, x, w = reduce_reference(case, world, rows, k, n, dtype, rank)
            if op == "gemm_rs":
                b = rows // world
                ref = total[rank * b:(rank + 1) * b]
            else:
                ref = total
            poison((tuple(ref.shape), dtype))
            out = fn(x.cuda(), w.cuda(), group=ctx)
            pending.append((dict(op=op, dtype=dname, m=rows, k=k, n=n, world=world, rank=rank),
                            out, ref))
        torch.cuda.synchronize()
        for c, out, ref in pending:
            check("out", out, ref, c)
            if op == "gemm_ar":
                assert_same_bits_on_ranks(out, world, c)


def assert_same_bits_on_ranks(out, world: int, c) -> None:
    """gemm_ar's contract: identical bits on every rank (compared through a two-float digest)."""
    digest = torch.tensor([float(out.float().sum().item()), float(out.float().abs().sum().item())])
    got = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(got, digest.double())
    assert all(torch.equal(g, got[0]) for g in got), f"gemm_ar differs across ranks: {c}"


def restore_env(saved: dict) -> None:
    """Put back the environment variables a suite changed (None: unset)."""
    for v, val in saved.items():
        if val is None:
            os.environ.pop(v, None)
        else:
            os.environ[v] = val


def suite_rs(ctx, rank: int, world: int) -> None:
    suite_reduce(ctx, rank, world, "gemm_rs")


def suite_ar(ctx, rank: int, world: int) -> None:
    suite_reduce(ctx, rank, world, "gemm_ar")


# Issue 12's flag room: gemm_ar two-shot (forced by the test at W = 2: MKERNEL_GEMM_AR_ALGO) with
# more flags than the old 1 << 16-word region held, so its slot indices run past word 65535 of
# the flag region: M = N ~ 16384 (ragged M), K = 64 per rank; 128x256 tiles (the model's pick)
# use slots up to 512 + 8192 x 9 = 74240, 128x128 tiles (pinned by MKERNEL_FUSED_CONFIG) up to
# 512 + 16384 x 5 = 82432. Before the fix both ran unfused ("more output tiles than the group's
# flag slots"); the test checks the fused kernel ran (MKERNEL_FUSED_VERBOSE lines). bf16 only:
# ~10 GiB per rank for the reference and the check.
# Distinct M per case: choose_path caches its verdict by shape, not by the pinned config.
BIGFLAG_SHAPES = [(16376, 64, 16384, None), (16368, 64, 16384, "coop_128x128_c2x1")]


def suite_bigflags(ctx, rank: int, world: int) -> None:
    saved = {"MKERNEL_FUSED_CONFIG": os.environ.get("MKERNEL_FUSED_CONFIG")}
    try:
        for i, (rows, k, n, pin) in enumerate(BIGFLAG_SHAPES):
            if pin is None:
                os.environ.pop("MKERNEL_FUSED_CONFIG", None)
            else:
                os.environ["MKERNEL_FUSED_CONFIG"] = pin
            case = 9000 + i
            total, x, w = reduce_reference(case, world, rows, k, n, torch.bfloat16, rank)
            poison(((rows, n), torch.bfloat16))
            out = mkernel.gemm_ar(x.cuda(), w.cuda(), group=ctx)
            torch.cuda.synchronize()
            c = dict(op="gemm_ar", dtype="bf16", m=rows, k=k, n=n, world=world, rank=rank,
                     config=pin or "model")
            check("out", out, total, c)
            assert_same_bits_on_ranks(out, world, c)
            del out, total
            torch.cuda.empty_cache()
    finally:
        restore_env(saved)


# fused18: shapes whose GEMM gives the 128x256 config every SM (ceil(M/128) * ceil(N/256) >= the
# share's SMs at W = 2, 4), so the knob's config is the one that runs. ag: (m per rank, k, n), the
# first and last on the peer-TMA route (m % 128 == 0), the second ragged (the copy route); reduce:
# (M, k, N), M not a multiple of 128, N / k multiples of 8.
C1X1_AG_SHAPES = [(1024, 512, 2048), (1000, 256, 2048), (2048, 1024, 4096)]
C1X1_REDUCE_SHAPES = [(2000, 512, 2048), (4104, 256, 4096)]


def suite_c1x1(ctx, rank: int, world: int) -> None:
    """MKERNEL_FUSED_C1X1=1 (fused18): the cluster-free coop_128x256_c1x1 fused kernels. Each shape
    of ag_gemm / gemm_rs / gemm_ar twice: as the forced measurement picks (the share's grid or the
    c1x1 co-resident grid, co_resident_grid_c1) and pinned to the c1x1 co-resident grid
    (MKERNEL_FUSED_SMS); two ag calls back to back without a sync; outputs from poisoned memory,
    each against the fp32 reference per tile; gemm_ar's bits equal on every rank; the knob's
    output against the default (2x1-cluster) kernel's recorded (CASE same_bits: same tile and k
    order, so same bits expected; informative). test_fused_ops checks the c1x1 launch lines."""
    from mkernel._fused_defaults import co_resident_grid_c1
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    co = co_resident_grid_c1(sms)
    saved = {v: os.environ.get(v) for v in ("MKERNEL_FUSED_C1X1", "MKERNEL_FUSED_SMS")}

    def setenv(c1: bool, pin: bool) -> None:
        os.environ["MKERNEL_FUSED_C1X1"] = "1" if c1 else "0"
        if pin and co > 0:
            os.environ["MKERNEL_FUSED_SMS"] = str(co)
        elif saved["MKERNEL_FUSED_SMS"] is None:
            os.environ.pop("MKERNEL_FUSED_SMS", None)
        else:
            os.environ["MKERNEL_FUSED_SMS"] = saved["MKERNEL_FUSED_SMS"]
    try:
        for dname, dtype in DTYPES.items():
            pending = []
            for i, (m, k, n) in enumerate(C1X1_AG_SHAPES):
                case = 9000 + 100 * i + (0 if dtype is torch.bfloat16 else 50)
                _, ref, x, w = ag_reference(case, world, m, k, n, dtype, rank)
                xd, wd = x.cuda(), w.cuda()
                for pin in (False, True):
                    setenv(True, pin)
                    poison(((world * m, n), dtype), ((world * m, k), dtype))
                    out1 = mkernel.ag_gemm(xd, wd, group=ctx)
                    out2 = mkernel.ag_gemm(xd, wd, group=ctx)  # no sync in between
                    setenv(False, False)
                    out_def = mkernel.ag_gemm(xd, wd, group=ctx)
                    c = dict(op="ag_gemm_c1x1", dtype=dname, m=m, k=k, n=n, world=world,
                             rank=rank, pinned_grid=co if pin else 0, peer=(m % 128 == 0))
                    pending.append((c, [out1, out2], ref, out_def))
            for op, fn in (("gemm_rs", mkernel.gemm_rs), ("gemm_ar", mkernel.gemm_ar)):
                for i, (rows, k, n) in enumerate(C1X1_REDUCE_SHAPES):
                    rows = (rows + world - 1) // world * world
                    case = 9500 + 100 * i + (0 if dtype is torch.bfloat16 else 50) + \
                        (10 if op == "gemm_rs" else 0)
                    total, x, w = reduce_reference(case, world, rows, k, n, dtype, rank)
                    b = rows // world
                    ref = total[rank * b:(rank + 1) * b] if op == "gemm_rs" else total
                    xd, wd = x.cuda(), w.cuda()
                    for pin in (False, True):
                        setenv(True, pin)
                        poison((tuple(ref.shape), dtype))
                        out1 = fn(xd, wd, group=ctx)
                        setenv(False, False)
                        out_def = fn(xd, wd, group=ctx)
                        c = dict(op=f"{op}_c1x1", dtype=dname, m=rows, k=k, n=n, world=world,
                                 rank=rank, pinned_grid=co if pin else 0)
                        pending.append((c, [out1], ref, out_def))
            torch.cuda.synchronize()
            for c, outs, ref, out_def in pending:
                for j, out in enumerate(outs):
                    check(f"c1x1_out{j}", out, ref, c)
                if c["op"] == "gemm_ar_c1x1":
                    assert_same_bits_on_ranks(outs[0], world, c)
                emit("CASE", dict(c, same_bits=bool(torch.equal(outs[0], out_def))))
    finally:
        restore_env(saved)


def suite_graph(ctx, rank: int, world: int) -> None:
    """Capture one ag_gemm, replay it with new inputs copied in (every rank changes its x)."""
    m, k, n, dtype = 300, 256, 512, torch.bfloat16
    x_static = torch.empty(m, k, dtype=dtype, device="cuda")
    _, _, x0, w = ag_reference(7, world, m, k, n, dtype, rank)
    x_static.copy_(x0)
    w_dev = w.cuda()
    mkernel.ag_gemm(x_static, w_dev, group=ctx)  # sizes the symmetric buffer, caches the order
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            out_static = mkernel.ag_gemm(x_static, w_dev, group=ctx)
    for case in (11, 12, 13):
        # New x on every rank, the captured w.
        xs = [inputs(case, s, m, k, n, dtype)[0] for s in range(world)]
        ref = torch.cat(xs).cuda().float() @ w.cuda().float().T
        x_static.copy_(xs[rank].cuda())
        graph.replay()
        torch.cuda.synchronize()
        check("graph_out", out_static, ref, dict(op="ag_gemm", graph=True, case=case, rank=rank))
    # gemm_rs and gemm_ar captured in one graph (the device epoch orders the calls).
    rows, k, n = 96 * world, 128, 264
    xr = torch.empty(rows, k, dtype=dtype, device="cuda")
    _, w0 = inputs(21, rank, rows, k, n, dtype)
    w_dev = w0.cuda()
    xr.copy_(inputs(21, rank, rows, k, n, dtype)[0].cuda())
    mkernel.gemm_rs(xr, w_dev, group=ctx)
    mkernel.gemm_ar(xr, w_dev, group=ctx)
    torch.cuda.synchronize()
    graph2 = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph2, stream=stream):
            rs_static = mkernel.gemm_rs(xr, w_dev, group=ctx)
            ar_static = mkernel.gemm_ar(xr, w_dev, group=ctx)
    for case in (22, 23):
        xs = [inputs(case, s, rows, k, n, dtype)[0] for s in range(world)]
        ws = [inputs(21, s, rows, k, n, dtype)[1] for s in range(world)]
        total = sum(xs[s].cuda().float() @ ws[s].cuda().float().T for s in range(world))
        xr.copy_(xs[rank].cuda())
        graph2.replay()
        torch.cuda.synchronize()
        b = rows // world
        check("graph_rs", rs_static, total[rank * b:(rank + 1) * b], dict(op="gemm_rs", graph=True, case=case, rank=rank))
        check("graph_ar", ar_static, total, dict(op="gemm_ar", graph=True, case=case, rank=rank))


def suite_mlp(ctx, rank: int, world: int, backend: str | None = None) -> None:
    """mkernel.nn column (sequence parallel) -> GeLU -> row (sequence parallel) in bf16, forward
    and backward through the fused ops, against the unfused fp32 model on the same weights.
    backend: also run the MLP under torch.compile(fullgraph=True) with that backend (issue 12
    item 7: one graph, no break, through the ops' fake kernels and registered autograd)."""
    import torch.nn.functional as F

    from mkernel.nn import ColumnParallelLinear, RowParallelLinear

    s, b, h, f = 64 * world, 2, 256, 128 * world
    fl = f // world
    g = torch.Generator().manual_seed(5)
    W1, b1 = torch.randn(f, h, generator=g) / 16, torch.randn(f, generator=g)
    W2, b2 = torch.randn(h, f, generator=g) / 16, torch.randn(h, generator=g)
    X, G = torch.randn(s, b, h, generator=g), torch.randn(s, b, h, generator=g)
    dt = torch.bfloat16
    ref = [t.to(dt).float().cuda().requires_grad_(True) for t in (W1, b1, W2, b2, X)]
    rW1, rb1, rW2, rb2, rX = ref
    ((F.gelu(rX @ rW1.T + rb1) @ rW2.T + rb2) * G.cuda()).sum().backward()
    want_y = (F.gelu(rX @ rW1.T + rb1) @ rW2.T + rb2).detach()

    col = ColumnParallelLinear(h, f, sequence_parallel=True, group=ctx, params_dtype=dt, device="cuda")
    row = RowParallelLinear(f, h, sequence_parallel=True, input_is_parallel=True, group=ctx,
                            params_dtype=dt, device="cuda")
    cols, seq = slice(rank * fl, (rank + 1) * fl), slice(rank * s // world, (rank + 1) * s // world)
    with torch.no_grad():
        col.weight.copy_(W1[cols])
        col.bias.copy_(b1[cols])
        row.weight.copy_(W2[:, cols])
        row.bias.copy_(b2)

    def mlp(inp: torch.Tensor) -> torch.Tensor:
        return row(F.gelu(col(inp)[0]))[0]

    runs = [("mlp", mlp)]
    if backend is not None:
        runs.append((f"mlp compiled ({backend})", torch.compile(mlp, backend=backend, fullgraph=True)))
    for tag, fn in runs:
        # Twice: the compiled function's first call traces and compiles, the second reuses it;
        # the second call's output and gradients are checked.
        for _ in range(2):
            x = X[seq].to(dt).cuda().requires_grad_(True)
            col.weight.grad = col.bias.grad = row.weight.grad = row.bias.grad = None
            y = fn(x)
            (y.float() * G[seq].cuda()).sum().backward()
        db2 = row.bias.grad.float().cpu()
        dist.all_reduce(db2)  # each rank's bias grad covers its tokens (bias.sequence_parallel)
        for name, got, want in (("y", y, want_y[seq]), ("dx", x.grad, rX.grad[seq]),
                                ("dW1", col.weight.grad, rW1.grad[cols]), ("db1", col.bias.grad, rb1.grad[cols]),
                                ("dW2", row.weight.grad, rW2.grad[:, cols]), ("db2", db2, rb2.grad)):
            got, want = got.double().cpu(), want.double().cpu()
            rel = ((got - want).norm() / want.norm()).item()
            emit("CASE", dict(op=tag, out=name, rel=rel, world=world, rank=rank))
            assert rel < 2e-2, f"{tag} {name}: relative error {rel:.3g}"


def suite_auto(ctx, rank: int, world: int) -> None:
    """The ops as users get them: the first call of a shape measures the fused kernel against the
    unfused path on every rank and the group keeps one (fused_common.h choose_path); the result
    is right either way, and a second call (the cached verdict) agrees bit for bit."""
    saved = os.environ.pop("MKERNEL_FUSED", None)
    try:
        rows, k, n, dtype = 256 * world, 512, 1024, torch.bfloat16
        total, x, w = reduce_reference(31, world, rows, k, n, dtype, rank)
        b = rows // world
        for name, fn, ref in (("gemm_rs", mkernel.gemm_rs, total[rank * b:(rank + 1) * b]),
                              ("gemm_ar", mkernel.gemm_ar, total)):
            first = fn(x.cuda(), w.cuda(), group=ctx)
            again = fn(x.cuda(), w.cuda(), group=ctx)
            torch.cuda.synchronize()
            c = dict(op=name, auto=True, m=rows, k=k, n=n, world=world, rank=rank)
            check("auto_first", first, ref, c)
            check("auto_again", again, ref, c)
        m = 200
        gathered_ref, ref, xa, wa = ag_reference(32, world, m, k, n, dtype, rank)
        out = mkernel.ag_gemm(xa.cuda(), wa.cuda(), group=ctx)
        torch.cuda.synchronize()
        check("auto_ag", out, ref, dict(op="ag_gemm", auto=True, m=m, world=world, rank=rank))
    finally:
        if saved is not None:
            os.environ["MKERNEL_FUSED"] = saved


def timed(fn, iters: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters * 1e3  # us


def suite_time(ctx, rank: int, world: int) -> None:
    """A first timing (not a benchmark; benchmarks/bench_fused.py is): fused vs the engine GEMM
    alone on the gathered rows at the same MPS share (NCCL cannot run several ranks on one GPU)."""
    for m, k, n in [(1024, 8192, 3584), (2048, 8192, 7168)]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        full = torch.randn(world * m, k, device="cuda", dtype=torch.bfloat16)
        fused = timed(lambda: mkernel.ag_gemm(x, w, group=ctx))
        os.environ["MKERNEL_FUSED_SIDE"] = "regs"  # the copy from registers (A/B)
        fused_regs = timed(lambda: mkernel.ag_gemm(x, w, group=ctx))
        del os.environ["MKERNEL_FUSED_SIDE"]
        gemm = timed(lambda: mkernel.gemm(full, w))
        emit("TIME", dict(op="ag_gemm", m=m, k=k, n=n, world=world, rank=rank, fused_us=fused,
                          fused_side_regs_us=fused_regs, gemm_alone_us=gemm))
    for rows, k, n in [(4096, 1024, 8192), (8192, 2048, 8192)]:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 32
        rs = timed(lambda: mkernel.gemm_rs(x, w, group=ctx))
        ar = timed(lambda: mkernel.gemm_ar(x, w, group=ctx))
        # The side warps' reduce from registers instead of staged through shared memory.
        os.environ["MKERNEL_FUSED_SIDE"] = "regs"
        rs_regs = timed(lambda: mkernel.gemm_rs(x, w, group=ctx))
        ar_regs = timed(lambda: mkernel.gemm_ar(x, w, group=ctx))
        del os.environ["MKERNEL_FUSED_SIDE"]
        gemm = timed(lambda: mkernel.gemm(x, w))
        emit("TIME", dict(op="gemm_rs/ar", m=rows, k=k, n=n, world=world, rank=rank, rs_us=rs,
                          ar_us=ar, rs_side_regs_us=rs_regs, ar_side_regs_us=ar_regs,
                          gemm_alone_us=gemm))


def fuzz_problems(world: int) -> list[tuple[str, str, int, int, int]]:
    """FUZZ_CASES (op, dtype, m, k, n) drawn from FUZZ_SEED, the same on every rank: m rows a rank
    (ag_gemm: its shard; gemm_rs: its output rows; gemm_ar: the rows), a tile-edge length a third
    of the time, K and N multiples of 8 log-uniform, the gathered problem capped at ~4 GFMA."""
    r = random.Random(f"fused-{os.environ.get('FUZZ_SEED', '0')}-{world}")

    def mult8(hi: int) -> int:
        return max(8, min(hi, (int(2 ** r.uniform(3, hi.bit_length())) + 7) // 8 * 8))

    out = []
    while len(out) < int(os.environ.get("FUZZ_CASES", "24")):
        op = r.choice(("ag_gemm", "gemm_rs", "gemm_ar"))
        m = r.choice((1, 2, 7, 63, 64, 65, 127, 128, 129, 333)) if r.random() < 0.33 \
            else int(2 ** r.uniform(0, 12))
        k, n = mult8(4096), mult8(8192)
        if m * world * k * n <= 4e9:
            out.append((op, r.choice(tuple(DTYPES)), m, k, n))
    return out


def suite_fuzz(ctx, rank: int, world: int) -> None:
    for i, (op, dname, m, k, n) in enumerate(fuzz_problems(world)):
        dtype = DTYPES[dname]
        case = 70000 + 10 * i
        c = dict(op=op, dtype=dname, m=m, k=k, n=n, world=world, rank=rank, fuzz=i,
                 seed=os.environ.get("FUZZ_SEED", "0"))
        emit("FUZZ", c)  # before the call: a hang or crash names its case
        if op == "ag_gemm":
            gathered_ref, ref, x, w = ag_reference(case, world, m, k, n, dtype, rank)
            poison(((world * m, n), dtype), ((world * m, k), dtype))
            out, gathered = mkernel.ag_gemm(x.cuda(), w.cuda(), group=ctx, return_gathered=True)
            torch.cuda.synchronize()
            check("out", out, ref, c)
            assert torch.equal(gathered.cpu(), gathered_ref), f"gathered differs: {c}"
            continue
        rows = m * world if op == "gemm_rs" else m
        total, x, w = reduce_reference(case, world, rows, k, n, dtype, rank)
        ref = total[rank * m:(rank + 1) * m] if op == "gemm_rs" else total
        poison((tuple(ref.shape), dtype))
        out = (mkernel.gemm_rs if op == "gemm_rs" else mkernel.gemm_ar)(x.cuda(), w.cuda(), group=ctx)
        torch.cuda.synchronize()
        check("out", out, ref, c)
        if op == "gemm_ar":
            assert_same_bits_on_ranks(out, world, c)


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.set_device(0)
    suites = os.environ.get("FUSED_SUITE", "ag").split(",")
    # The suites test the fused kernels themselves: pin them (choose_path would otherwise keep
    # the unfused path where it measures faster); suite "auto" tests the choice.
    os.environ.setdefault("MKERNEL_FUSED", "force")
    if os.environ.get("FUSED_GRID") == "co_resident":
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        # fused_common.cpp co_resident_grid: MKERNEL_FUSED_CO_GRID (opt-in) or the default rule
        from mkernel._fused_defaults import co_resident_grid
        co = os.environ.get("MKERNEL_FUSED_CO_GRID", "")
        os.environ["MKERNEL_FUSED_SMS"] = co if co.isdigit() else str(co_resident_grid(sms))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ctx = mkernel.init()
    for name in suites:
        try:
            {"ag": suite_ag, "rs": suite_rs, "ar": suite_ar, "graph": suite_graph,
             "mlp": suite_mlp, "time": suite_time, "auto": suite_auto,
             "peertma": suite_peertma, "peergraph": suite_peergraph, "agdefault": suite_agdefault,
             "c1x1": suite_c1x1, "copyengine": suite_copyengine, "cekill": suite_cekill,
             "rscopyengine": suite_rscopyengine, "rscekill": suite_rscekill,
             "bigflags": suite_bigflags, "fuzz": suite_fuzz, "bucket": suite_bucket, "store": suite_store,
             "compile": lambda c, r, w: suite_mlp(c, r, w, backend="inductor"),
             "compile_aot": lambda c, r, w: suite_mlp(c, r, w, backend="aot_eager")}[name](ctx, rank, world)
        except Exception:
            # A trapped device wait leaves a record naming the op, peer and flag.
            print(f"WAIT rank {rank}: {mkernel.ops.last_wait_failure()}", file=sys.stderr, flush=True)
            raise
        print(f"SUITE {name} done on rank {rank}", flush=True)
    torch.cuda.synchronize()
    print(f"OK {rank}", flush=True)
    mkernel.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
