# Session 25, call E (one H200): call D found the hooked launch's KV waits ARE its gap to the plain kernel
# (no waits at all: 3-17 % faster than the cached waits). Fewer, longer key chunks per shard (MKERNEL_RING_CHUNKS,
# host-side geometry only): the gap script with 16 / 8 / 4 / 2 chunks, the pinned tests at 4, the ring bench under
# MPS at 16 and at 4.
# Prediction (NOTES "Session 25"): chunks 4 recovers most of ring_nowait's lead in the ceiling (within 2 % of it);
# the fused ring under MPS no slower at 4 than at 16 (x_ceil within noise).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=60 JOBS=.ci/jobs/s25e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=330 bash .ci/gpu-dev
R=tests/gpu/test_ring_attention.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx gap 60 30 "timeout 58 python3 benchmarks/ring_hooked_gap.py --iters 15"
jx ring 60 30 "timeout 58 $P $R -k 'CHUNKS'"
jx bench4 60 40 "MKERNEL_RING_CHUNKS=4 timeout 58 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 50"
jx bench16 60 40 "timeout 58 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 50"
