# Session 38, call A on main (after session 37's merges: ring-any-dim, bwd-dq-warp, ring-own-direct; the GEMM / fused /
# MoE header refactors 8b27edd / ba7f1a0, SASS-identical on the CPU, build here for the first time). .bp/ holds the
# s36-int pack (csrc of 6003702): ~90 steps past it — BP_MAX_STEPS=200, BP_PACK=1 (a new pack for B), TOTAL=560.
# Then a regression pass over what the refactors touch (GEMM engine incl. split-K / swap / gemv, the fused GEMM ops at
# W = 2, MoE at W = 2) and the per-shape native-backward data (GQA, d = 64) for the non-causal default decision.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 BP_PACK=1 JOBS=.ci/jobs/s38a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx gemm_tests 120 40 "timeout 118 $P tests/gemm/test_gemm_splitk.py tests/gemm/test_gemm_swap.py tests/gemm/test_gemv.py tests/gemm/test_gemm_hooks.py"
F=tests/gpu/test_fused_ops.py
jx fused_w2 120 40 "timeout 118 $P '$F::test_ag_gemm[2]' '$F::test_reduce_ops[rs-2]' '$F::test_reduce_ops[ar-2]' '$F::test_mlp_layers[2]' '$F::test_graph_replay[2]'"
M=tests/gpu/test_moe_ranks.py
jx moe_w2 90 40 "timeout 88 $P '$M::test_moe_cuda_ranks_match_reference[2]' '$M::test_moe_cuda_ranks_fused[2]'"
jx bwd_gqa 100 50 "timeout 98 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --kv-heads 8 --native-kernels wgmma,wgmma_ws_dqwarp"
jx bwd_d64 100 50 "timeout 98 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --head-dim 64 --modes nc --native-kernels wgmma,wgmma_ws_dqwarp"
