# Session 24, call B (nvidia-h200-x2). (1) fused_diag agfc1 + orders on whole GPUs with cuBLAS and the hooked
# kernel without waits per config in the same timing (call A: the fused ops 1.07-1.12x the engine GEMM alone;
# which part is the config — the fused kernels exist for coop c2x1/c1x1 only — and which the communication);
# (2) the MoE gather on by default where a rank has its GPU to itself: the one-node tests at W=2 (a GPU per rank:
# the gathered path now) incl. graph replay and MoEBuffer, and the table; (3) a build pack of this tree.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 BP_MAX_STEPS=200 JOBS=.ci/jobs/s24b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
mps_stop
jx diag 150 60 "timeout 148 python3 benchmarks/fused_diag.py --world 2 --sections agfc1,orders --timeout 140"
jx moe_tests 120 50 "timeout 118 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_moe_ranks.py -k 'match_reference[2] or graph_replay[2] or w2n1 or aten_routing'"
jx table 70 40 "timeout 68 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 20"
