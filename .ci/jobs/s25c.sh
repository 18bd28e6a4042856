# Session 25, call C (one H200): the ring's hooked kernel with the KV flags remembered across tiles (SeenFlags)
# and the late claim, both on by default. Tests first (engine hooks, compute-alone bit for bit with every knob,
# the ring at W=2/4/8 under MPS, session 24's defaults pinned), then ring_hooked_gap.py (one process, whole GPU)
# and the ring bench under MPS (W=2).
# Prediction (NOTES "Session 25"): ring_default 3-10 % under ring_s24 non-causal; causal also the late claim's
# 3-5 % (to the static order's level or better); bits identical.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=60 JOBS=.ci/jobs/s25c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=580 bash .ci/gpu-dev
R=tests/gpu/test_ring_attention.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx attn_tests 80 40 "timeout 78 $P tests/attention/test_attention_hooks.py tests/attention/test_ring_compute_alone.py"
jx gap 60 30 "timeout 58 python3 benchmarks/ring_hooked_gap.py --iters 15"
jx ring 150 60 "timeout 148 $P $R -k 'matches_reference or world_eight or bit_for_bit or FLAG_CACHE'"
jx bench 110 60 "timeout 108 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 100"
