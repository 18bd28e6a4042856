"""A model of gemm_rs-across-nodes' coalesced sends (xnode6, MKERNEL_FUSED_RS_NODES_COALESCE;
fused_hooks.cuh net_send_unit / net_flush_run / rs_tile_slot, fused_common.cpp reduce_call's
net_block): the protocol's invariants on the host, since the kernel has not run on a GPU yet.

- slots: the (CTA, unit) layout's slot cta * upc + k (upc = ceil(units / (grid / cluster_m)))
  stays below the host's bound cluster_m * units_m * (tiles_n + 1) + grid for every grid up to the
  host's fused grid (the kernel's own grid is never larger);
- runs: replaying the send logic on arbitrary unit sequences, every command to an owner carries
  a flag (last unit + 1) that covers only units already sent to that owner (the receiver of unit
  k waits for flag >= k + 1: it must never pass before unit k's bytes were pushed), commands to an
  owner go out in increasing flag order, every unit with rows of a remote owner is sent exactly
  once, a command covers at most `coalesce` whole tiles, and its slots are contiguous."""

from __future__ import annotations

import random


def slot_bound(tiles_m: int, tiles_n: int, units_m: int, grid: int) -> int:
    cluster_m = max(2, (tiles_m + units_m - 1) // units_m)
    return cluster_m * units_m * (tiles_n + 1) + grid


def test_slot_index_stays_within_the_host_bound():
    for tiles_m in range(1, 80):
        for tiles_n in (1, 3, 14, 28, 32, 57):
            units_m = (tiles_m + 1) // 2  # 2-CTA clusters along M (the fused configs: c2x1)
            units = units_m * tiles_n
            for fused_grid in (2, 16, 28, 32, 48, 66, 132):
                bound = slot_bound(tiles_m, tiles_n, units_m, fused_grid)
                for grid in range(2, fused_grid + 1, 2):
                    stride = grid // 2
                    upc = (units + stride - 1) // stride
                    for cta in range(grid):
                        first = cta // 2
                        ks = len(range(first, units, stride))
                        if ks:
                            assert cta * upc + ks - 1 < bound, (tiles_m, tiles_n, grid, cta)


def replay(units, coalesce: int):
    """units: per unit k of one CTA, {owner: whole} for the remote owners it has rows of (in owner
    order, as net_send_unit's loop). Returns the commands: (owner, first_k, last_k, whole).
    A line-by-line mirror of net_send_unit's push loop (the two steps, one push site) and
    net_send_tiles' final flush (net_flush_run)."""
    cmds = []
    st = {"run_n": 0, "run_owner": -1, "run_last": -1, "run_first": -1, "run_next": 0}

    def push(o, first, last, whole):
        cmds.append((o, first, last, whole))

    for k, owners in enumerate(units):
        for o, whole_rows in owners.items():
            whole = coalesce > 0 and whole_rows
            alone = coalesce <= 0
            if coalesce > 0:
                if whole and st["run_n"] > 0 and st["run_owner"] == o and st["run_last"] == k - 1:
                    st["run_last"] = k
                    st["run_n"] += 1
                else:
                    st["run_next"] = 1 if whole else 0
                    alone = not whole
            for step in range(2):
                cmd = None
                if (step == 0 and coalesce > 0 and st["run_n"] > 0 and
                        (st["run_owner"] != o or st["run_last"] != k or st["run_n"] >= coalesce)):
                    cmd = (st["run_owner"], st["run_first"], st["run_last"], True)
                    st["run_n"] = 0
                elif step == 1 and alone:
                    cmd = (o, k, k, whole_rows)
                if step == 1 and whole and st["run_n"] == 0 and st["run_next"] != 0:
                    st["run_next"] = 0
                    st.update(run_owner=o, run_last=k, run_first=k, run_n=1)
                    if coalesce == 1:
                        cmd = (o, k, k, True)
                        st["run_n"] = 0
                if cmd is not None:
                    push(*cmd)
    if st["run_n"] > 0:  # net_flush_run
        push(st["run_owner"], st["run_first"], st["run_last"], True)
        st["run_n"] = 0
    return cmds


def test_coalesced_runs_keep_the_flag_protocol():
    rng = random.Random(7)
    for trial in range(3000):
        n_units = rng.randint(0, 40)
        owners = list(range(rng.randint(1, 4)))
        units = []
        for _ in range(n_units):
            kind = rng.random()
            if kind < 0.25:
                units.append({})  # a local tile (or no unit): no push
            elif kind < 0.85:
                units.append({rng.choice(owners): True})
            else:  # a tile meeting two owners, or a ragged one
                a = rng.choice(owners)
                units.append({a: rng.random() < 0.3, (a + 1) % 5: False})
        coalesce = rng.choice([0, 1, 2, 3, 8, 64])
        cmds = replay(units, coalesce)
        sent: dict[int, set] = {}
        last_flag: dict[int, int] = {}
        for o, first, last, whole in cmds:
            assert first <= last and (whole or first == last)
            if coalesce > 0:
                assert last - first + 1 <= max(coalesce, 1)
            # contiguous slots: every unit in [first, last] was a whole tile for o
            for k in range(first, last + 1):
                assert units[k].get(o) is not None and (first == last or units[k][o]), (trial, k)
                assert k not in sent.setdefault(o, set()), "a unit sent twice"
                sent[o].add(k)
            flag = last + 1
            assert flag > last_flag.get(o, 0), "flags to an owner must increase"
            last_flag[o] = flag
            # every unit of o below the flag was sent by now (the receiver may pass for it)
            want = {k for k in range(flag) if o in units[k]}
            assert want <= sent[o], (trial, o, flag, sorted(want - sent[o]))
        # every remote unit went out
        for k, owners_k in enumerate(units):
            for o in owners_k:
                assert k in sent.get(o, set()), (trial, k, o)
