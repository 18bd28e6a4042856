# Session 20 call F: what call E left of the env registry's reach: the routing kernels' knob (moe_ep.cpp) and the
# fused ops across emulated nodes (fused_common.cpp reads ~26 knobs through env::get now), incl. a killed rank.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s20f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=330 bash .ci/gpu-dev
N=tests/gpu/test_fused_nodes.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx routing 90 40 "timeout 88 $P tests/gpu/test_moe_routing.py"
jx fused_nodes 170 60 "MKERNEL_OP_TIMEOUT=20 timeout 168 $P \"$N::test_fused_ops_across_nodes[2-2-False]\" \"$N::test_ag_gemm_across_nodes_killed_rank\" \"$N::test_first_calls_across_nodes_gpu_direct[thread-rs1-1]\""
