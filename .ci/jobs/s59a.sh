# Next one-GPU call (prepared in session 58): the dev pack in .bp/ (commit 6a7ecb9's csrc) restores in seconds:
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_MAX_STEPS=100000 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s59a.sh \
#     REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 TAIL_LINES=30 bash .ci/gpu-dev          (carry .bp, .whl)
# rest: the 23 not-big tests of test_fused_ops.py that s58a's budget cut off (s57a / s58a passed the other 30:
# test_ag_gemm, test_co_resident_grid, test_c1x1_kernels, test_gemm_ar_flag_range, test_mlp_layers,
# test_mlp_compiled, test_graph_replay, the reduce-op and verdict-store tests).
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
# Parts (run in order; a cold call's build leaves ~130 s, so call 1 runs `a` and a chained warm call the rest):
#   a: gemm_ar_both_algorithms x2, launch_gate x8; b: peer_tma x2 (+ its graph replay x2), default_route x2;
#   c: copy_engine x3 + killed rank, fused_ops_fuzz x3.
for part in ${PARTS:-a b c}; do
  case $part in
  a) jx a 300 60 "$P tests/gpu/test_fused_ops.py -m 'not big' -k 'gemm_ar_both_algorithms or launch_gate'" ;;
  b) jx b 300 60 "$P tests/gpu/test_fused_ops.py -m 'not big' -k 'peer_tma or default_route'" ;;
  c) jx c 300 60 "$P tests/gpu/test_fused_ops.py -m 'not big' -k 'copy_engine or fused_ops_fuzz'" ;;
  esac
done
