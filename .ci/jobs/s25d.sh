# Session 25, call D (one H200): the flag cache keyed by slot (every flag of the launch, not one flag row: a CTA's
# tiles change batch every few tiles), and where the rest of the hooked kernel's gap to the plain one is: the same
# launch with no KV wait at all (MKERNEL_RING_MEASURE_NO_WAIT=1, compute-alone only). Tests, then the gap script
# and the ring bench under MPS.
# Prediction (NOTES "Session 25"): ring_default 0-2 % faster than call C at mha / s12k (b = 4), unchanged at gqa
# (b = 1, one row); ring_nowait within 1 % of ring_default (the waits are not the gap) -> the gap is elsewhere.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=60 JOBS=.ci/jobs/s25d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=480 bash .ci/gpu-dev
R=tests/gpu/test_ring_attention.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx attn_tests 80 40 "timeout 78 $P tests/attention/test_attention_hooks.py tests/attention/test_ring_compute_alone.py"
jx gap 60 30 "timeout 58 python3 benchmarks/ring_hooked_gap.py --iters 15"
jx ring 120 60 "timeout 118 $P $R -k 'matches_reference or world_eight or bit_for_bit or FLAG_CACHE or killed_rank_fails'"
jx bench 80 50 "timeout 78 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 70"
