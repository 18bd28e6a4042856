# Session 29, call C (warm, REUSE_BUILD=1): the native backward (ws smoke, tests), the CE route smoke,
# the MoE default tests again with a longer limit (call B's ran past 98 s), the CE route at W=4/8.
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=8"
N=tests/attention/test_attention_backward_native.py
F=tests/gpu/test_fused_ops.py
M=tests/gpu/test_moe_ranks.py
jx ws_smoke 40 20 "timeout 38 $P $N -k 'wgmma_ws and case5'"
jx bwd_tests 110 40 "timeout 108 $P $N -k 'not wgmma_ws'"
jx ce_smoke 90 40 "timeout 88 $P $F -k 'copy_engine and 2'"
jx moe 170 60 "timeout 168 $P -v $M -k 'overlapped or cuda_ranks_match_reference or graph_replay or w2n1'"
jx ce_tests 150 60 "timeout 148 $P $F -k 'copy_engine and (4 or 8)'"
