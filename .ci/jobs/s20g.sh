# Session 20 call G: with the in-process copier (MKERNEL_NET_GDR_COPIER=thread) the fused ops are not offered across
# nodes (fused_nodes_enabled; call F: the fused gemm_rs's copies never ran behind its grid's waits). Prediction: the
# thread case passes (unfused, the reason logged once), the process copier's case still measures fused candidates.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s20g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
N=tests/gpu/test_fused_nodes.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx first_calls 130 40 "MKERNEL_OP_TIMEOUT=20 timeout 128 $P \"$N::test_first_calls_across_nodes_gpu_direct[thread-rs1-1]\" \"$N::test_first_calls_across_nodes_gpu_direct[process-ag1,ag2-0]\""
