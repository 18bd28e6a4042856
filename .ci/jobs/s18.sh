# Next session's first device call (session 17 left these; NOTES "Session 17, moe14" and "flags17"):
#   A: MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s18.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=A TOTAL=588 BP_PACK=1 bash .ci/gpu-dev
#      (cold build ~545 s: carry build/core + .whl; the pack comes back as bp.partNN — carry it in .bp/ with
#      build/core as .bp/core.tar.xz on later calls: `tar xJf .bp/core.tar.xz && ... CALL=B ...`)
case "${CALL:-A}" in
A)
  # moe14 rule 2's last condition: mode 3's sync test; then the default path with session 17's new defaults
  # (kernel layout where counted, early combine) at W=2 and W=4 across nodes.
  jx moe14_sync 40 25 'timeout 38 python3 -m pytest -x -q -rA -p no:cacheprovider "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_moe14[w2n2-p3-kl-sync]"'
  ;;
B)
  jx moe_defaults 150 60 'timeout 148 python3 -m pytest -x -q -rA -p no:cacheprovider tests/gpu/test_moe_ranks.py -k "test_moe_cuda_across_emulated_nodes and not moe14 and not pipelined"'
  jx moe14_bench 60 40 'bash benchmarks/moe14_device_job.sh'
  # flags17 (merged in session 18): the 4 MiB flag region's GPU test, then W=4 square M=16384 gemm_ar.
  jx fl_gpu 200 100 'timeout 198 python3 -m pytest -q -x -rA -p no:cacheprovider tests/gpu/test_fused_ops.py::test_gemm_ar_flag_range'
  jx fl_w4 75 60 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 4 --set issue --only "square M=16384" --ops gemm_ar --lean --budget 50 --timeout 70'
  ;;
esac
