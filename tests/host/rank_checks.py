"""What each rank process of tests/host runs: the ops through the host reference backend against
a float64 torch reference computed from every rank's inputs.

Inputs are fresh random tensors seeded by (call, rank), so every rank regenerates every other
rank's inputs and computes the reference itself; outputs are compared by relative error
(``‖out − ref‖ / ‖ref‖``). The torch side (the reference's collectives, the cross-rank checks)
runs over gloo. A rank prints ``CASE {json}`` per checked call and ``OK <rank>`` at the end; a
failed check raises (exit status 1) with the case in the message.

``main()`` reads ``TEST_SUITE`` (comma-separated): ``matrix``, ``back_to_back``, ``grow``,
``mismatch``, ``two_groups``, ``threads``, ``paths``, ``loop`` (fault tests: calls until an error).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import mkernel

_STDOUT = threading.Lock()


def emit(tag: str, payload: str) -> None:
    """One record per line, whole: print() writes the text and the newline
    separately, so two threads (the "threads" suite) could splice their lines."""
    with _STDOUT:
        sys.stdout.write(f"{tag} {payload}\n")
        sys.stdout.flush()

BOUNDS = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    diff = (out.double() - ref).norm().item()
    norm = ref.norm().item()
    return diff / norm if norm > 0 else diff


def make(seed: int, rank: int, rows: int, k: int, n: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s inputs of call `seed`: x [rows, k], w [n, k] (scaled so sums stay O(1))."""
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    x = torch.randn(rows, k, generator=g, dtype=torch.float64)
    w = torch.randn(n, k, generator=g, dtype=torch.float64) / math.sqrt(max(k, 1))
    return x.to(dtype), w.to(dtype)


def shapes(op: str, world: int, rows: int, k: int, n: int, r: int) -> tuple[int, int, int]:
    """Rank r's (rows, k, n) of a case: ragged where the op allows it.

    ag_gemm: m and K equal on every rank, N differs per rank (w is the rank's column shard);
    gemm_rs / gemm_ar: M and N equal on every rank, the K shard k differs per rank.
    """
    if op == "ag_gemm":
        return rows, k, n + r % 3
    return rows, k + 2 * r, n


class Checker:
    def __init__(self, ctx, tag: str = ""):
        self.ctx, self.rank, self.world = ctx, ctx.rank, ctx.world_size
        self.tag = tag
        self.calls = 0

    def run(self, op: str, dtype: str, rows: int, k: int, n: int, *, seed: int | None = None,
            timed: int = 0) -> dict:
        """One call of `op` on this checker's group, checked against the float64 reference."""
        dt = DTYPES[dtype]
        self.calls += 1
        seed = self.calls if seed is None else seed
        world, rank = self.world, self.rank
        ins = [make(seed, r, *shapes(op, world, rows, k, n, r), dt) for r in range(world)]
        x, w = ins[rank]
        t0 = time.perf_counter()
        if op == "ag_gemm":
            out, gathered = mkernel.ag_gemm(x, w, group=self.ctx, return_gathered=True)
            gx = torch.cat([xi for xi, _ in ins])
            assert torch.equal(gathered, gx), f"{self.case(op, dtype, rows, k, n)}: gathered x differs"
            ref = gx.double() @ w.double().T
        else:
            fn = mkernel.gemm_rs if op == "gemm_rs" else mkernel.gemm_ar
            out = fn(x, w, group=self.ctx)
            ref = sum(xi.double() @ wi.double().T for xi, wi in ins)
            if op == "gemm_rs":
                b = rows // world
                ref = ref[rank * b:(rank + 1) * b]
        elapsed = time.perf_counter() - t0
        assert out.dtype == dt and tuple(out.shape) == tuple(ref.shape), (
            f"{self.case(op, dtype, rows, k, n)}: got {tuple(out.shape)} {out.dtype}")
        err = rel_err(out, ref)
        rec = {"group": self.tag, "op": op, "dtype": dtype, "rows": rows, "k": k, "n": n,
               "err": err, "bound": BOUNDS[dt], "s": elapsed}
        emit("CASE", json.dumps(rec))
        assert err <= BOUNDS[dt], f"{self.case(op, dtype, rows, k, n)}: relative error {err:.3g} > {BOUNDS[dt]}"
        if op == "gemm_ar":  # every rank must hold the same bits
            digest = hashlib.sha1(out.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
            digests = [None] * world
            dist.all_gather_object(digests, digest, group=getattr(self.ctx, "pg", None))
            assert len(set(digests)) == 1, f"{self.case(op, dtype, rows, k, n)}: ranks differ: {digests}"
        return rec

    def case(self, op, dtype, rows, k, n) -> str:
        return (f"rank {self.rank}/{self.world}{' ' + self.tag if self.tag else ''}: {op} {dtype} "
                f"rows={rows} k={k} n={n} (call {self.calls})")


def matrix(c: Checker) -> None:
    """Every op, fp32 and bf16 (fp16 once), ragged shapes, an empty shard and M < W."""
    w = c.world
    for dtype in ("fp32", "bf16"):
        c.run("ag_gemm", dtype, 37, 61, 29)
        c.run("ag_gemm", dtype, 1, 7, 3)
        c.run("gemm_rs", dtype, 3 * w, 45, 31)
        c.run("gemm_rs", dtype, w, 1, 9)
        c.run("gemm_ar", dtype, 2 * w + 3, 33, 41)
        c.run("gemm_ar", dtype, max(1, w - 1), 5, 17)  # M < W: some blocks are empty
    c.run("ag_gemm", "fp16", 5, 24, 40)
    c.run("ag_gemm", "fp32", 0, 16, 8)  # an empty shard everywhere
    c.run("gemm_ar", "fp16", 13, 19, 11)


def back_to_back(c: Checker) -> None:
    """Five calls in a row on one group, no barrier, fresh inputs each; same op, then mixed."""
    for _ in range(5):
        c.run("gemm_ar", "fp32", 11, 23, 19)
    for op in ("ag_gemm", "gemm_rs", "gemm_ar", "ag_gemm", "gemm_rs"):
        c.run(op, "bf16", 2 * c.world, 13, 21)
    # The same inputs twice: the rank-order sums make gemm_rs bit-reproducible.
    x, wt = make(999, c.rank, 4 * c.world, 40 + c.rank, 24, torch.float32)
    a = mkernel.gemm_rs(x, wt, group=c.ctx)
    b = mkernel.gemm_rs(x, wt, group=c.ctx)
    assert torch.equal(a, b), f"rank {c.rank}: gemm_rs is not reproducible"


def grow(c: Checker) -> None:
    """A call larger than the data paths' first buffers regrows them on every rank alike."""
    before = json.loads(torch.ops.mkernel._group_info(c.ctx.handle))
    c.run("ag_gemm", "fp32", 90, 200, 7)  # 72 KB of x per rank: more than the first 64 KiB
    c.run("gemm_ar", "fp32", 120, 17, 150)
    c.run("gemm_rs", "bf16", 2 * c.world, 9, 5)  # small again: no shrink, no regrow
    after = json.loads(torch.ops.mkernel._group_info(c.ctx.handle))
    assert after["opens"] > before["opens"], (before["opens"], after["opens"])
    for p in after["paths"]:
        assert p["recv_capacity"] >= c.world * 90 * 200 * 4, p


def mismatch(c: Checker) -> None:
    """Ranks that disagree on a shape all get an error naming a peer; the group stays usable."""
    m = 5 + (c.rank == c.world - 1)
    x, w = make(77, c.rank, m, 8, 4, torch.float32)
    try:
        mkernel.ag_gemm(x, w, group=c.ctx)
    except RuntimeError as e:
        msg = str(e)
        assert "mkernel.ag_gemm" in msg and "must be the same on every rank" in msg, msg
        assert f"rank {c.world - 1}" in msg or c.rank == c.world - 1, msg
    else:
        raise AssertionError(f"rank {c.rank}: mismatched m was accepted")
    xr, wr = make(78, c.rank, c.world, 3, 4 + (c.rank == 0), torch.float32)
    try:
        mkernel.gemm_rs(xr, wr, group=c.ctx)
    except RuntimeError as e:
        assert "N (w's row count) must be the same on every rank" in str(e), str(e)
    else:
        raise AssertionError(f"rank {c.rank}: mismatched N was accepted")
    # A dtype that differs across ranks is named as every other message names dtypes.
    xd, wd = make(79, c.rank, 6, 8, 4, torch.bfloat16 if c.rank == c.world - 1 else torch.float32)
    try:
        mkernel.gemm_ar(xd, wd, group=c.ctx)
    except RuntimeError as e:
        msg = str(e)
        assert "every rank must use the same dtype" in msg and "bf16" in msg and "fp32" in msg, msg
        assert "Float" not in msg and "BFloat16" not in msg, msg
    else:
        raise AssertionError(f"rank {c.rank}: mismatched dtypes were accepted")
    c.run("gemm_ar", "fp32", 7, 9, 5)  # still works


def paths(c: Checker, nodes: int) -> None:
    """Peers of the same emulated node are reached over loopback, the others over tcp."""
    info = json.loads(torch.ops.mkernel._group_info(c.ctx.handle))
    per = c.world // nodes
    node = [r // per for r in range(c.world)]
    want = {}
    same = [r for r in range(c.world) if r != c.rank and node[r] == node[c.rank]]
    other = [r for r in range(c.world) if node[r] != node[c.rank]]
    if per > 1:
        want["intra-node"] = ("loopback", same)
    if nodes > 1:
        want["inter-node"] = (os.environ.get("MKERNEL_NET") or "tcp", other)
    got = {p["label"]: (p["transport"], p["peers"]) for p in info["paths"]}
    assert got == want, f"rank {c.rank}: data paths {got}, expected {want}"
    assert len(set(info["node"])) == nodes, info["node"]


def two_groups(c: Checker) -> None:
    """A second context (all ranks, its own session) and a sub-group, interleaved with the first."""
    ranks = list(range(c.world))
    g2 = mkernel.init(dist.new_group(ranks))
    c2 = Checker(g2, "g2")
    half = [r for r in ranks if r % 2 == 0]
    sub_pg = dist.new_group(half) if len(half) > 1 else None
    c3 = Checker(mkernel.init(sub_pg), "even") if sub_pg is not None and c.rank in half else None
    for i in range(3):
        c.run("gemm_ar", "fp32", 9, 14, 6)
        c2.run("ag_gemm", "bf16", 3, 10, 12)
        if c3 is not None:
            c3.run("gemm_rs", "fp32", 2 * c3.world, 11, 7)
        c2.run("gemm_ar", "fp32", 5, 6, 7)
    g2.close()
    if c3 is not None:
        c3.ctx.close()


def threads(c: Checker) -> None:
    """Two groups driven at once from two threads of every rank."""
    g2 = mkernel.init(dist.new_group(list(range(c.world))))
    c2 = Checker(g2, "g2-thread")
    errors = []

    def drive(chk, op):
        try:
            for _ in range(4):
                chk.run(op, "fp32", 2 * chk.world + 1 if op == "gemm_ar" else 2 * chk.world, 15, 9,
                        seed=1000 + chk.calls)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    # gemm_ar compares digests over gloo: keep the torch collectives on the main group only.
    t = threading.Thread(target=drive, args=(c2, "ag_gemm"))
    t.start()
    drive(c, "gemm_ar")
    t.join(120)
    assert not t.is_alive(), f"rank {c.rank}: the second thread hangs"
    if errors:
        raise errors[0]
    g2.close()


def loop(c: Checker) -> None:
    """Fault tests: calls until one fails; prints the error and how long the failing call took."""
    print("PID", os.getpid(), flush=True)
    die_after = float(os.environ.get("TEST_DIE_AFTER", "0"))
    victim = int(os.environ.get("TEST_VICTIM", "-1"))
    if c.rank == victim and die_after > 0:
        def die():
            time.sleep(die_after)
            os.kill(os.getpid(), 9)  # mid-op: the main thread is inside a call

        threading.Thread(target=die, daemon=True).start()
    x, w = make(5, c.rank, 64 * c.world, 96, 96, torch.float32)
    calls = 0
    deadline = time.monotonic() + float(os.environ.get("TEST_LOOP_S", "60"))
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            mkernel.gemm_ar(x, w, group=c.ctx)
            mkernel.ag_gemm(x, w, group=c.ctx)
        except RuntimeError as e:
            print("ERR", json.dumps({"calls": calls, "s": time.monotonic() - t0, "msg": str(e)}),
                  flush=True)
            try:
                mkernel.gemm_rs(x, w, group=c.ctx)
            except RuntimeError as e2:
                assert "unusable after an earlier failure" in str(e2), str(e2)
            else:
                raise AssertionError("a broken group accepted another call")
            os._exit(0)  # the group is gone: no barrier, no orderly shutdown
        calls += 1
    raise AssertionError(f"rank {c.rank}: no failure after {calls} calls")


def snapshot_stalls(ctx, by_open: dict[int, dict]) -> None:
    """The proxies' stall counters now, under the data paths' generation: a call that
    outgrows the buffers reopens the paths (the "grow" suite), and new proxies count from 0."""
    info = json.loads(torch.ops.mkernel._group_info(ctx.handle))
    by_open[info["opens"]] = {p["transport"]: p["stats"]["stalls"] for p in info["paths"]}


def total_stalls(by_open: dict[int, dict]) -> dict:
    """Per transport, the last counts of every generation of the paths, summed."""
    total: dict[str, dict[str, int]] = {}
    for paths in by_open.values():
        for transport, stalls in paths.items():
            t = total.setdefault(transport, {})
            for kind, n in stalls.items():
                t[kind] = t.get(kind, 0) + n
    return total


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    c = Checker(ctx)
    nodes = int(os.environ.get("TEST_NODES", "1"))
    stalls_by_open: dict[int, dict] = {}
    for suite in os.environ.get("TEST_SUITE", "matrix").split(","):
        if suite == "paths":
            paths(c, nodes)
        elif suite == "skip_call":  # the victim skips the second call
            c.run("gemm_ar", "fp32", 7, 9, 5)
            if c.rank == int(os.environ["TEST_VICTIM"]):
                time.sleep(float(os.environ.get("TEST_SLEEP_S", "5")))
                print("SKIPPED", flush=True)
                os._exit(0)
            t0 = time.monotonic()
            try:
                c.run("gemm_ar", "fp32", 7, 9, 5)
            except RuntimeError as e:
                print("ERR", json.dumps({"s": time.monotonic() - t0, "msg": str(e)}), flush=True)
                os._exit(0)
            raise AssertionError("a call without one rank succeeded")
        else:
            globals()[suite](c)
        if os.environ.get("MKERNEL_NET_FAULTS"):
            snapshot_stalls(ctx, stalls_by_open)
    if os.environ.get("MKERNEL_NET_FAULTS"):  # the proxies waited for reordered commands
        emit("STALLS", json.dumps(total_stalls(stalls_by_open)))
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", c.rank, c.calls, flush=True)
