"""``python -m mkernel demo``: the main job, across several local processes.

Starts ``world`` rank processes (gloo process group; each on GPU ``rank %
ngpus`` when GPUs are present), splits them into ``nodes`` emulated nodes,
joins them with :func:`mkernel.init`, and has each rank report what mkernel
sees. Then ag_gemm, gemm_rs, gemm_ar, the MoE dispatch + combine and ring attention run on fresh random inputs (on CPU
through the host reference backend: FIFO -> Go proxy -> loopback within an
emulated node, tcp across) against a plain torch reference built from every
rank's inputs; rank 0 prints a table of relative error and time.

Each op runs on every backend of the machine: the CPU (the host reference
kernels, present everywhere) and, where GPUs are, CUDA. An op whose kernel is not
built for a backend (it raises NotImplementedError) is SKIPPED and listed with
the reason;
it never counts as ok. The demo exits non-zero when any op that ran errs or
exceeds its error bound, when nothing ran at all, and, with ``--require-all``,
when any op was skipped.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from . import _env_knobs


def run_demo(world: int = 4, nodes: int = 2, timeout: float = 120.0, require_all: bool = False) -> int:
    """Launch the demo's ranks with ``python -m mkernel launch`` (mkernel/launch.py: MPS when a
    GPU and the MPS control binary are present) and wait for them; returns the exit status
    (non-zero when an op failed, nothing ran, or, with require_all, an op was skipped as not
    built)."""
    import shutil

    from .launch import LaunchError, launch

    if world < 1 or nodes < 1 or world % nodes:
        print(f"demo: --world ({world}) must be a positive multiple of --nodes ({nodes})", file=sys.stderr)
        return 2
    # MPS only where ranks must share a GPU (more ranks than GPUs); with a GPU per rank each
    # rank has its device to itself (worker: rank % device_count).
    mps = world > _gpus() and _gpus() > 0 and shutil.which("nvidia-cuda-mps-control") is not None
    try:
        rc = launch(["-m", "mkernel.demo", "--worker"], world, nodes, mps=mps, timeout=timeout,
                    env={"MKERNEL_DEMO_REQUIRE_ALL": str(int(require_all))})
    except LaunchError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 2
    return 0 if rc == 0 else 1


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# Relative error bounds (||out - ref|| / ||ref||) by dtype; the demo fails above them.
_BOUNDS = {"fp32": 1e-5, "bf16": 1e-2, "fp16": 1e-2}


def _rel_err(out, ref) -> float:
    ref = ref.double()
    norm = ref.norm().item()
    diff = (out.double() - ref).norm().item()
    return diff / norm if norm > 0 else diff


# Row status, all-reduced with MAX over the ranks: the worst any rank saw wins.
_RAN, _MISSING, _ERROR = 0, 1, 2


def _backends() -> list[tuple[str, list[str]]]:
    """(device type, dtypes) the demo runs: the CPU always (the host reference kernels), CUDA
    (bf16) where GPUs are."""
    import torch

    return [("cpu", ["fp32", "bf16"])] + ([("cuda", ["bf16"])] if torch.cuda.is_available() else [])


def _try_ops(ctx, calls: int = 5) -> list[dict]:
    """Run each op on each backend on fresh random inputs against a plain torch reference built
    from every rank's inputs (all-gathered with torch.distributed). Returns one row per (op,
    backend, dtype) with its status (ran / missing: the kernel is not built for the backend /
    error), the relative error (max over ranks), the median time of `calls` calls (max over
    ranks) and whether it ran within its bound."""
    import statistics

    import torch
    import torch.distributed as dist

    import mkernel

    world, rank = ctx.world_size, ctx.rank
    m, big_m, k, n = 37, 10 * world, 64, 96  # ragged m: not a multiple of any tile
    rows = []
    for backend, dtype in [(b, d) for b, dts in _backends() for d in dts]:
        cuda = backend == "cuda"
        dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        g = torch.Generator().manual_seed(1234 + rank)

        def make(r_rows):
            x = torch.randn(r_rows, k, generator=g, dtype=torch.float64)
            w = torch.randn(n, k, generator=g, dtype=torch.float64) / k ** 0.5
            return x.to(dev, dt), w.to(dev, dt)

        def gather(t):
            parts = [torch.empty_like(t, device="cpu") for _ in range(world)]
            dist.all_gather(parts, t.cpu())
            return [p.double() for p in parts]

        cases = []
        x, w = make(m)
        xs = gather(x)
        cases.append(("ag_gemm", f"x [{m}, {k}] x{world}, w [{n}, {k}]",
                      lambda x=x, w=w: mkernel.ag_gemm(x, w, group=ctx),
                      lambda xs=xs, w=w: torch.cat(xs) @ w.double().cpu().T))
        x, w = make(big_m)
        xs, ws = gather(x), gather(w)
        full = sum(xi @ wi.T for xi, wi in zip(xs, ws))
        b = big_m // world
        cases.append(("gemm_rs", f"x [{big_m}, {k}], w [{n}, {k}]",
                      lambda x=x, w=w: mkernel.gemm_rs(x, w, group=ctx),
                      lambda full=full: full[rank * b:(rank + 1) * b]))
        x, w = make(m)
        xs, ws = gather(x), gather(w)
        cases.append(("gemm_ar", f"x [{m}, {k}], w [{n}, {k}]",
                      lambda x=x, w=w: mkernel.gemm_ar(x, w, group=ctx),
                      lambda xs=xs, ws=ws: sum(xi @ wi.T for xi, wi in zip(xs, ws))))
        cases.append(_moe_case(ctx, dev, dt, g, gather, k, n))
        cases.append(_ring_case(ctx, dev, dt, g, gather))
        for name, shape, fn, ref in cases:
            row = {"op": name, "backend": backend, "dtype": dtype, "shape": shape, "bound": _BOUNDS[dtype]}
            status, reason = _RAN, ""
            try:
                out = fn()
                times = []
                for _ in range(calls):
                    if cuda:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    fn()
                    if cuda:
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - t0)
                err, median_s = _rel_err(out.cpu(), ref()), statistics.median(times)
            except NotImplementedError as e:  # the kernel is not built for this backend
                status, reason, err, median_s = _MISSING, str(e).splitlines()[0], -1.0, -1.0
            except Exception as e:  # noqa: BLE001  (reported in the table, fails the demo)
                status, reason, err, median_s = _ERROR, f"{type(e).__name__}: {str(e).splitlines()[0]}", -1.0, -1.0
            stats = torch.tensor([float(status), err, median_s], dtype=torch.float64)
            dist.all_reduce(stats, op=dist.ReduceOp.MAX)
            reasons = [None] * world
            dist.all_gather_object(reasons, reason)
            code, row["err"], row["median_s"] = int(stats[0]), stats[1].item(), stats[2].item()
            row["status"] = {_RAN: "ran", _MISSING: "missing", _ERROR: "error"}[code]
            row["reason"] = next((r for r in reasons if r), "")
            row["ok"] = code == _RAN and row["err"] <= row["bound"]
            rows.append(row)
    return rows


def _moe_case(ctx, dev, dt, g, gather, h: int, f: int) -> tuple:
    """moe: moe_dispatch_gemm then moe_combine (tokens to their top-2 experts' ranks, each expert's
    GEMM, the outputs back and summed with the routing weights): out[t] = sum_j w[t, j] *
    (x[t] @ w1[e_j].T), ragged token counts per rank, 2 experts per rank."""
    import torch

    import mkernel

    world, rank = ctx.world_size, ctx.rank
    e_local, top = 2, 2
    experts = e_local * world
    t = 11 + 4 * rank  # ragged: no two ranks alike
    x = torch.randn(t, h, generator=g, dtype=torch.float64)
    idx = torch.stack([torch.randperm(experts, generator=g)[:top] for _ in range(t)]) if t else \
        torch.zeros(0, top, dtype=torch.int64)
    wts = torch.rand(t, top, generator=g, dtype=torch.float64)
    w1 = torch.randn(e_local, f, h, generator=g, dtype=torch.float64) / h ** 0.5
    w1_all = torch.cat(gather(w1.to(dt)))  # [experts, f, h], as every rank holds them
    x_d, w1_d = x.to(dev, dt), w1.to(dev, dt)
    idx_d, wts_d = idx.to(dev), wts.to(dev, torch.float32)

    def run():
        # The weights ride with the dispatch: across nodes the combine then needs no exchange of
        # its own before its first partial sum.
        d = mkernel.moe_dispatch_gemm(x_d, idx_d, w1_d, num_experts=experts, topk_weights=wts_d,
                                      group=ctx)
        return mkernel.moe_combine(d.out, d.handle, wts_d, group=ctx)

    def ref():
        xr = x.to(dt).double()
        per = torch.einsum("th,tjfh->tjf", xr, w1_all[idx])  # [t, top, f]
        return (per * wts.to(torch.float32).double().unsqueeze(-1)).sum(1)

    return "moe", f"x [{t}, {h}] top-{top} of {experts}", run, ref


def _ring_case(ctx, dev, dt, g, gather) -> tuple:
    """ring_att: ring_attention (non-causal, GQA 4 query heads on 2 KV heads, d 64): this rank's
    queries over every rank's keys and values."""
    import torch

    import mkernel

    b, s, h, hkv, d = 1, 24, 4, 2, 64
    q, k, v = (torch.randn(b, s, heads, d, generator=g, dtype=torch.float64).to(dt)
               for heads in (h, hkv, hkv))
    ks, vs = torch.cat(gather(k), 1), torch.cat(gather(v), 1)  # [b, W*s, hkv, d]
    qd, kd, vd = q.to(dev), k.to(dev), v.to(dev)

    def run():
        return mkernel.ring_attention(qd, kd, vd, causal=False, group=ctx)[0]

    def ref():
        rep = h // hkv
        kk, vv = ks.repeat_interleave(rep, 2), vs.repeat_interleave(rep, 2)
        att = torch.einsum("bqhd,bkhd->bhqk", q.double(), kk) / d ** 0.5
        return torch.einsum("bhqk,bkhd->bqhd", att.softmax(-1), vv)

    return "ring_att", f"q [{b}, {s}, {h}, {d}] x{ctx.world_size}", run, ref


def _verdict(rows: list[dict], require_all: bool) -> tuple[bool, str]:
    """(passed, one-line summary): nothing that did not run counts as ok."""
    ran = [r for r in rows if r["status"] == "ran"]
    failed = [r for r in rows if r["status"] == "error" or (r["status"] == "ran" and not r["ok"])]
    missing = [r for r in rows if r["status"] == "missing"]
    names = lambda rs: ", ".join(f"{r['op']}/{r['backend']}/{r['dtype']}" for r in rs)  # noqa: E731
    parts = [f"{len(ran) - len([r for r in failed if r['status'] == 'ran'])} of {len(rows)} op runs ok"]
    if failed:
        parts.append(f"FAILED: {names(failed)}")
    if missing:
        parts.append(f"SKIPPED (kernel not built for that backend): {names(missing)}"
                     + ("; --require-all makes that a failure" if not require_all else ""))
    passed = not failed and bool(ran) and not (require_all and missing)
    if not ran:
        parts.append("nothing ran")
    return passed, f"demo: {'PASSED' if passed else 'FAILED'}: " + "; ".join(parts)


def _print_ops(rows: list[dict], world: int, nodes: int) -> None:
    print(f"ops across {world} ranks in {nodes} emulated nodes "
          "(relative error ||out - ref|| / ||ref||, max over ranks; time: median of 5 calls, "
          "max over ranks)")
    print(f"{'op':<8} {'device':<6} {'dtype':<5} {'shape':<28} {'max rel err':>11} {'bound':>7} "
          f"{'time':>10}  status")
    for r in rows:
        head = f"{r['op']:<8} {r['backend']:<6} {r['dtype']:<5} {r['shape']:<28}"
        if r["status"] != "ran":
            what = ("SKIPPED: not built for this backend" if r["status"] == "missing" else "FAIL")
            print(f"{head} {'-':>11} {r['bound']:>7.0e} {'-':>10}  {what} ({r['reason'][:90]})")
            continue
        print(f"{head} {r['err']:>11.2e} {r['bound']:>7.0e} {r['median_s'] * 1e3:>8.2f}ms  "
              f"{'ok' if r['ok'] else 'FAIL: error above bound'}")


def _worker() -> int:
    import torch
    import torch.distributed as dist

    import mkernel

    rank = int(os.environ["RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())
    else:  # the ranks share this machine's cores: no oversubscribed (spinning) thread pools
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["WORLD_SIZE"])))
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    topo = mkernel.topology()
    mine = {"rank": ctx.rank, "node": int(_env_knobs.get("MKERNEL_EMULATED_NODE", "0")),
            "host": socket.gethostname(), "pid": os.getpid(),
            "device": f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu",
            "gpus": len(topo.get("gpus") or []), "nics": len(topo.get("nics") or [])}
    rows = [json.loads(b) for b in ctx.allgather_bytes(json.dumps(mine).encode())]
    ops = _try_ops(ctx)
    nodes = len({(r["host"], r["node"]) for r in rows})
    ctx.barrier()
    if ctx.rank == 0:
        from .doctor import collect

        print(f"mkernel demo: {ctx.world_size} ranks, session {ctx.handle}")
        print(f"{'rank':>4} {'node':>4} {'host':<20} {'pid':>8} {'device':<8} {'sysfs GPUs':>10} {'NICs':>5}")
        for r in rows:
            print(f"{r['rank']:>4} {r['node']:>4} {r['host']:<20} {r['pid']:>8} {r['device']:<8} "
                  f"{r['gpus']:>10} {r['nics']:>5}")
        report = collect()
        bad = [f for f in report["findings"] if f["status"] != "ok"]
        print(f"doctor: {'BROKEN' if report['broken'] else 'ok'}; " +
              "; ".join(f"[{f['status']}] {f['check']}" for f in bad))
        _print_ops(ops, ctx.world_size, nodes)
    passed, summary = _verdict(ops, _env_knobs.get("MKERNEL_DEMO_REQUIRE_ALL") == "1")
    if ctx.rank == 0:
        print(summary)
    mkernel.shutdown()
    dist.destroy_process_group()
    return 0 if passed else 1


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(run_demo(require_all="--require-all" in sys.argv))
