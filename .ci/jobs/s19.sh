# Next session's device jobs (session 18 left these; NOTES "Session 18, moe15"):
#   A: MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s19.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=A TOTAL=588 BP_PACK=1 bash .ci/gpu-dev
#      (cold build ~516 s: carry build/core + .whl; the pack comes back as bp.partNN — carry it in .bp/ with
#      build/core as .bp/core.tar.xz on later calls: `tar xJf .bp/core.tar.xz && ... CALL=B ...`)
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
case "${CALL:-A}" in
A)
  # moe15 (opt-in MKERNEL_MOE_OP_STREAM=1): its test (matrix, repeats, graph replay), then the bench with it.
  jx opstream_test 22 14 'MKERNEL_MOE_OP_STREAM=1 timeout 20 python3 -m pytest -x -q -rA -p no:cacheprovider "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_moe14[w2n2-p3-kl]"'
  jx opstream_bench 16 12 "MKERNEL_MOE_OP_STREAM=1 timeout 15 $B"
  ;;
B)
  # The same-build baseline, then the default-path MoE tests with the knob (moe15's rule before a flip).
  jx opstream_base 16 12 "timeout 15 $B"
  # Megatron-style jobs set CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue): does the exchange (side
  # streams with spinning waits) pass, fail with its bounded wait's record, or does the copier refuse the IPC
  # as it did at 32 (session 18 call C)? Informational: the answer decides an up-front check.
  jx conn1 40 25 'CUDA_DEVICE_MAX_CONNECTIONS=1 MKERNEL_OP_TIMEOUT=10 timeout 38 python3 -m pytest -x -q -rA -p no:cacheprovider "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_moe14[w2n2-p3-kl]"'
  jx opstream_defaults 150 60 'MKERNEL_MOE_OP_STREAM=1 timeout 148 python3 -m pytest -x -q -rA -p no:cacheprovider tests/gpu/test_moe_ranks.py -k "test_moe_cuda_across_emulated_nodes and not moe14 and not pipelined"'
  ;;
esac
