# Session 19 call B (after call A's -080023.json): moe16's unstage with one watcher CTA polling the
# host flags (was: every copier CTA) and mkernel's op stream as the default (MKERNEL_MOE_OP_STREAM
# unset = on). Prediction (NOTES "Session 19, moe16 watcher"): p4_kl eager dispatch 1.35-1.65 ms (was
# 3.85), the graph replay <= 1.5 ms (was 4.05); the default dispatch ~1.65 ms (call A's opstream run).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s19b.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=B TOTAL=400 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
T="tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_moe14"
jobs_b() {
  jx p4_tests 80 40 "timeout 78 python3 -m pytest -x -q -rA -p no:cacheprovider \"$T[w2n2-p4-kl]\" \"$T[w2n2-p4-kl-sync]\" \"$T[w2n2-p4]\" \"$T[w4n4-p4-kl]\""
  jx bench 26 14 "BENCH_MOE14_DROP=${S19_DROP:-} timeout 24 $B"
  jx conn1_p4 30 20 "CUDA_DEVICE_MAX_CONNECTIONS=1 MKERNEL_OP_TIMEOUT=10 timeout 28 python3 -m pytest -x -q -rA -p no:cacheprovider \"$T[w2n2-p4-kl]\""
  jx defaults 150 60 'timeout 148 python3 -m pytest -x -q -rA -p no:cacheprovider tests/gpu/test_moe_ranks.py -k "test_moe_cuda_across_emulated_nodes and not moe14 and not pipelined"'
}
case "${CALL:-B}" in
B) jobs_b ;;
esac
