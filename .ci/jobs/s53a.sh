# Next session, first call (prepared in session 52, not run): the small-M GEMM at the power cap with the full engine.
# Session 52's M = 333 rows (0.72-0.81x cuBLAS sustained) came from a dev build, which has no swapped-operand kernels:
# run this one WITHOUT MKERNEL_DEV_BUILD (from the dev pack ninja compiles the ~30 gemm_swap_*.cu units on top: ~150-250
# s on 16 cores; BP_MAX_STEPS=60). The tuner now warms to the cap before it ranks (session 52), small M included.
# Predictions: (1) M = 333 (8192x8192, 8192x3584, 3584x8192 weights) 0.95-0.99x cuBLAS sustained, the tuned plan a
# swapped 128x168 / 64x168 variant (cuBLAS: nvjet 128x168 2x1); where below 0.97x, per cycle below 0.97x too (the miss
# is the kernel's, not the power's). (2) The held-out short bench (bench_gemm.py heldout, auto vs cuBLAS) with the new
# tuner: 8192x7168x8192 / 16384x7168x8192 within +-2% of session 16's 0.95-0.98x (the short bench runs partly above the
# cap's clock, where the old pick was ~1% faster).
#   tar xJf .bp/core.tar.xz && BP_PACK=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=60 JOBS=.ci/jobs/s53a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> bash .ci/gpu-dev
# (BP_PACK=1 packs the full build: check that .bp/ plus .whl/ stay under the 64 MiB carry limit; else drop BP_PACK.)
# The jobs need ~500 s after the build: with TOTAL=580 the call skips the last ones (named in its summary); run those
# next with REUSE_BUILD=1 and a job file of the rest within the 30 s the machine stays warm.
# (0) Tests first: the substrate's cudaMalloc gives torch's cache back before it fails (comm/device_alloc.h, session 52,
# host-compiled only): the new case (the device filled with freed torch blocks, then a growing all_gather) and the
# collectives' matrix at W = 2 3 4 8, then the ring cases that ran out of memory in s52d (W = 8 over emulated nodes).
# And the GEMM tuner's warm-up tests (session 52: the rule's bounds, its knob refusing bad values by name).
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx tests 210 60 "timeout 205 $P tests/gpu/test_collectives.py tests/gpu/test_ring_attention.py tests/gemm/test_gemm_autotune.py -k 'warm_up or takes_back_torch_cache or test_collectives_match_reference or test_ring_attention_across_emulated_nodes'"
jx gemm_power_333 100 50 "timeout 98 env MKERNEL_GEMM_AUTOTUNE_LOG=1 python3 benchmarks/gemm_power.py --shapes '333,8192,8192;333,8192,3584;333,3584,8192' --window 1.5 --rounds 3"
jx heldout 120 50 "timeout 118 python3 benchmarks/bench_gemm.py --shapes heldout --no-sweep"
# (3) The grouped (MoE) GEMM at the cap (benchmarks/grouped_gemm_power.py, new in session 52, not yet run): the short
# bench has it 1.05x / 1.12x torch._grouped_mm (uniform / skewed, H200). Prediction: 1.00-1.08x sustained on the H100,
# the tuned plan a 128x256 cooperative one (tuned at the cap now), ping_128x128 >= 3% behind it per joule.
jx grouped_power 80 40 "timeout 78 python3 benchmarks/grouped_gemm_power.py --window 1.5 --rounds 3"
