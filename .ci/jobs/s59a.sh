# Next one-GPU call (prepared in sessions 58-59). Session 59 got no machine and its checkout had no .bp/, so the
# first call is likely cold: a dev build (~390 s on 16 jobs) that returns its pack, then part a in what is left:
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 BP_XZ=3 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s59a.sh \
#     PARTS=a REAL_OUT=$OUT OUT=/tmp/devout TOTAL=565 TAIL_LINES=30 bash .ci/gpu-dev        (carry .bp, .whl)
# then at once (within the 30 s idle release) REUSE_BUILD=1 PARTS="b c e" ..., and d f in a third warm call.
# Or, with ~70 minutes of this machine's CPUs first: MKERNEL_DEV_BUILD=1 bash .ci/local-pack (every CUDA object
# compiled here from .ci/gpu-build.ninja's command lines), then BP_MAX_STEPS=100000 on a cold call (host files only).
# rest: the 23 not-big tests of test_fused_ops.py that s58a's budget cut off (s57a / s58a passed the other 30:
# test_ag_gemm, test_co_resident_grid, test_c1x1_kernels, test_gemm_ar_flag_range, test_mlp_layers,
# test_mlp_compiled, test_graph_replay, the reduce-op and verdict-store tests).
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
# Parts (run in order; a cold call's build leaves ~130 s, so call 1 runs `a` and a chained warm call the rest):
#   a: gemm_ar_both_algorithms x2, launch_gate x8; b: peer_tma x2 (+ its graph replay x2), default_route x2;
#   c: copy_engine x3 + killed rank, fused_ops_fuzz x3;
#   d: the attention forward's burst bench at S = 2048 / 4096 / 32768 (both modes): STATUS's causal 32k figure on an
#      H100 (0.960x cuDNN, session 42) predates session 51's L2 order (sustained at the cap session 52 read 1.007x).
#      Prediction: causal 32k 0.99-1.02x cuDNN, non-causal 4096 0.98-1.01x, 2048 0.94-0.97x.
#   e: gemm_rs's copy-engine route (session 59, written without a GPU: MKERNEL_FUSED_RS_COPY_ENGINE, fused_copy_engine.h
#      RsCopyEngine, kernels/fused/rs_copy_engine.cu): test_gemm_rs_copy_engine[2/4] and its killed rank; part c's
#      test_ag_gemm_copy_engine covers the flag-write helper both routes now share.
#   f: the route timed under MPS at W = 2 (multigpu.py on one GPU: the fused kernel, the route, the unfused op).
#      Prediction: on one GPU the route 0.9-1.05x the fused kernel at Llama fc2 (its partials cross no link; the
#      reduce pass reads W + 1 blocks after the last GEMM); its reason to exist is two real GPUs (s59x2).
for part in ${PARTS:-a b c d e f}; do
  case $part in
  a) jx a 300 60 "$P tests/gpu/test_fused_ops.py -m 'not big' -k 'gemm_ar_both_algorithms or launch_gate'" ;;
  b) jx b 300 60 "$P tests/gpu/test_fused_ops.py -m 'not big' -k 'peer_tma or default_route'" ;;
  c) jx c 300 60 "$P tests/gpu/test_fused_ops.py -m 'not big' -k 'ag_gemm_copy_engine or fused_ops_fuzz or (killed_rank and not rscekill)'" ;;
  e) jx e 200 60 "$P tests/gpu/test_fused_ops.py -k 'gemm_rs_copy_engine or rscekill'" ;;
  f) jx f 150 60 "timeout 148 python3 benchmarks/multigpu.py --world 2 --only gemm_rs --rs-routes fused,ce --iters 10 --timeout 140" ;;
  d) jx d 90 40 "timeout 88 python3 benchmarks/bench_attention.py --seqs 2048,4096,32768 --modes nc,c --skip-alt --iters 20" ;;
  esac
done
