# Session 51, call E: causal keeps the 24 MiB sections (s51d, sustained: causal 8192 4 MiB 553.6 vs 24 MiB 563.6 TF/s,
# 16384 equal; non-causal 4096 4 MiB 594.8 vs 24 MiB 574.5, cuDNN 584.4); the split tail's schedule mirror
# (tests/attention/split_tail_plan.py) follows the 4 MiB budget (s51d's three test_split_tail_variant failures: the
# mirror still had 24 MiB, so it named the wrong tiles as merged).
# Predictions (before the run): every test below passes; sustained causal 8192 default == 0:24 within noise (the same
# path), non-causal 4096 default ~1.02x cuDNN; burst bench non-causal 4096 ~1.0x cuDNN, causal as before (~1.0x).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s51e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=30 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx engine_tests 110 40 "timeout 105 $P tests/attention/test_l2_sections.py tests/attention/test_split_tail_plan.py tests/attention/test_attention_engine.py -k 'l2_section or split_tail or forward_matches or default_is or cuda_graph or variant_switch or matches_sdpa or mainloop_variants or linear_order or cpp_schedule'"
jx power_c8192 50 35 "timeout 48 python3 benchmarks/attention_power.py --causal --seq 8192 --variants 0,0:24,0:4 --backends cudnn --window 2 --rounds 3"
jx power_nc4096 50 35 "timeout 48 python3 benchmarks/attention_power.py --seq 4096 --variants 0,0:24 --backends cudnn --window 2 --rounds 3"
jx bench 60 30 "timeout 58 python3 benchmarks/bench_attention.py --seqs 2048,4096,8192,16384 --modes nc,c --skip-alt --iters 20"
