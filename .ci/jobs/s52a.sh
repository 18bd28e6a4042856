# Next session, first call (prepared in session 51, not yet run): the power cap's other levers. Session 51 found the
# attention kernels at the H100's 700 W cap, where DRAM bytes cost clock: the forward's 4 MiB L2 sections gave +3.7%
# sustained at 4096 (NOTES "Session 51"). Three places with the same pattern, judged by attention_power.py (sustained):
#  1. the native causal backward's sections (attention_bwd_api.h bwd_tile_sections, 40 MB of Q / dO / dq_accum rows:
#     4 pairs at 8192, 2 at 16384), now a measurement switch (MKERNEL_ATTN_BWD_L2_SECTION_MB). The causal default
#     backward is cuDNN's kernel (s51g: 1.004x cuDNN's sustained at 8192); the native causal measured 0.975-1.005x.
#     Prediction: native:8 / native:16 +1..+3% over native (40) at 8192 and 16384; if native:N beats auto by >= 1% at
#     both, the causal d = 128 backward's auto rule is the next change (with its wall-time rows).
#  2. the causal forward's sections (24 MiB kept: 4 MiB lost 1.8% at 8192 to the claimed order's balance): 12 / 8 MiB
#     between. Prediction: 0:12 within +-0.5% of 24 at 8192, +0..+1% at 16384 / 32768.
#  3. the 2048-key non-causal forward (0.951x cuDNN, burst): the 128x128 mainloops with the lazy rescale (133256,
#     395400 = + bits 17-18) against the default there (2184). Prediction: 395400 +1..+2% over 2184 sustained.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s52a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=40 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx tests 90 30 "timeout 85 $P tests/attention/test_attention_backward_native.py -k 'l2_section or tile_order' tests/attention/test_l2_sections.py"
jx bwd_c8192 60 35 "timeout 58 python3 benchmarks/attention_power.py --backward --causal --seq 8192 --bwd-specs auto,native,native:8,native:16 --backends cudnn --window 1.5 --rounds 3"
jx bwd_c16384 70 35 "timeout 68 python3 benchmarks/attention_power.py --backward --causal --seq 16384 --bwd-specs auto,native,native:8,native:16 --backends cudnn --window 1.5 --rounds 3"
jx fwd_c8192 45 30 "timeout 43 python3 benchmarks/attention_power.py --causal --seq 8192 --variants 0,0:12,0:8 --backends cudnn --window 1.5 --rounds 3"
jx fwd_c32768 60 30 "timeout 58 python3 benchmarks/attention_power.py --causal --seq 32768 --variants 0,0:12,0:8 --backends cudnn --window 1.5 --rounds 3"
jx fwd_nc2048 45 30 "timeout 43 python3 benchmarks/attention_power.py --seq 2048 --variants 0,133256,395400 --backends cudnn --window 1.5 --rounds 3"
# 4. GEMM at the cap (benchmarks/gemm_power.py, new, same harness): the engine's held-out misses at M = 333 (0.94-0.98x
#    cuBLAS in short graph-replay samples, session 16) and a square row. Prediction: every row at the 700 W cap except
#    perhaps M = 333 (a weight-streaming GEMM: DRAM-bound, below the cap); at M = 333 the per-cycle and per-joule
#    ratios equal the time ratio (same clock), i.e. the miss is in the kernel, not the power. The swizzle columns
#    (the tuned plan's config at tile-order bands of 1 and 8): at 8192^3 the wider band within +-1% of the tuned one
#    in the short bench's choice, and ahead by >= 1% sustained only if the narrow band's DRAM bytes push the clock.
jx gemm_power 120 40 "timeout 118 python3 benchmarks/gemm_power.py --shapes '333,8192,8192;333,8192,3584;333,3584,8192;8192,8192,8192' --swizzles 1,8 --window 1.5 --rounds 3"
