# Session 20 call E: the env registry (every MKERNEL_* read through env::get; ~20 host TUs, collectives.cu,
# gemm_dispatch.cu and the copier helper rebuilt) on the GPU: the demo across emulated nodes, the MoE defaults,
# collectives across nodes (the copier process reads its knobs through the registry now), the fused core, the ring,
# tests/ops, then tests/gemm with what is left. Prediction: every test passes (a refactor that changes no behaviour).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s20e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
F=tests/gpu/test_fused_ops.py
R=tests/gpu/test_ring_attention.py
C=tests/gpu/test_collectives.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx demo 60 30 "timeout 58 python3 -m mkernel demo --world 4 --nodes 2 --require-all"
jx moe_coll 90 40 "timeout 88 $P \"$M::test_moe_cuda_across_emulated_nodes[2]\" \"$M::test_moe_cuda_across_emulated_nodes[w4n4]\" \"$C::test_collectives_across_emulated_nodes[2-2]\" \"$C::test_killed_rank_fails_the_others_within_the_timeout[2]\""
jx fused_ring 100 40 "MKERNEL_OP_TIMEOUT=20 timeout 98 $P \"$F::test_ag_gemm[4]\" \"$F::test_reduce_ops[rs-2]\" \"$F::test_reduce_ops[ar-4]\" \"$F::test_launch_gate[graph-2]\" \"$R::test_ring_attention_matches_reference[2]\" \"$R::test_fused_ring_across_emulated_nodes[2]\""
jx ops 150 40 "timeout 148 $P tests/ops"
jx gemm 200 40 "timeout 198 $P tests/gemm"
