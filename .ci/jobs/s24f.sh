# Session 24, call F (one H200, ranks under MPS). The MoE gather's new default (auto: on only where a rank has its
# GPU to itself, fused_common gpu_sharers collective at the first dispatch) on the shared GPU: the one-node tests at
# W=2/4/8 (expansion path by default, the gathered one forced), graph replay, MoEBuffer, the packed grouped GEMM's
# tests after the launch_packed refactor, and the table (expected as session 23's expansion rows).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s24f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=400 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx one_node 200 60 "timeout 198 $P $M -k 'cuda_ranks_match_reference or graph_replay or gathered_rows or w2n1 or aten_routing'"
jx grouped 50 25 "timeout 48 $P tests/gemm/test_gemm_grouped.py"
jx table 70 40 "timeout 68 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 20"
