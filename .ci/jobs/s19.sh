# Next session's device jobs (session 18 left these; NOTES "Session 18, moe15" and "moe16"):
#   A, if .bp/ survived (bp.part00/01 + core.tar.xz: session 18's pack of 16542e2; since then only
#   moe_net.cu / moe_net.cpp / moe_nodes.cpp changed, ~3 ninja steps, ~60 s instead of a 516 s cold build):
#      tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s19.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=AB TOTAL=560 bash .ci/gpu-dev
#      (carry [".whl", ".bp"]; CALL=AB runs both job lists in one call, TOTAL=560)
#   A, from nothing: MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s19.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=A TOTAL=588 BP_PACK=1 bash .ci/gpu-dev
#      (cold build ~516 s: carry build/core + .whl; the pack comes back as bp.partNN — carry it in .bp/ with
#      build/core as .bp/core.tar.xz on later calls: `tar xJf .bp/core.tar.xz && ... CALL=B ...`)
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
T="tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_moe14"
jobs_a() {
  # moe16 (opt-in mode 4: one launch per side) and moe15 (opt-in MKERNEL_MOE_OP_STREAM=1): a test each
  # (matrix vs float64, repeats, graph replay). The cold build leaves ~50 s.
  jx p4_test 22 14 "timeout 20 python3 -m pytest -x -q -rA -p no:cacheprovider \"$T[w2n2-p4-kl]\""
  jx opstream_test 22 14 "MKERNEL_MOE_OP_STREAM=1 timeout 20 python3 -m pytest -x -q -rA -p no:cacheprovider \"$T[w2n2-p3-kl]\""
}
jobs_b() {
  # The lean bench with both beside the defaults (S19_DROP=p4 / opstream / "p4,opstream": what failed its
  # test in call A), then moe16's remaining tests (the host sync between the halves, the ATen layout, W=4 over 4 nodes), the
  # default-path tests with the op stream, then CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's setting:
  # informational, it decides an up-front check).
  jx bench 24 14 "BENCH_MOE14_DROP=${S19_DROP:-} timeout 22 $B"
  jx p4_more 70 40 "timeout 68 python3 -m pytest -x -q -rA -p no:cacheprovider \"$T[w2n2-p4-kl-sync]\" \"$T[w2n2-p4]\" \"$T[w4n4-p4-kl]\""
  jx opstream_defaults 150 60 'MKERNEL_MOE_OP_STREAM=1 timeout 148 python3 -m pytest -x -q -rA -p no:cacheprovider tests/gpu/test_moe_ranks.py -k "test_moe_cuda_across_emulated_nodes and not moe14 and not pipelined"'
  # The deadlock model predicts: mode 3 stalls at the send stream's finish (a bounded wait's record naming
  # DONE, after MKERNEL_OP_TIMEOUT) and mode 4, whose finish ends the receive stream, passes.
  jx conn1_p4 30 20 "CUDA_DEVICE_MAX_CONNECTIONS=1 MKERNEL_OP_TIMEOUT=10 timeout 28 python3 -m pytest -x -q -rA -p no:cacheprovider \"$T[w2n2-p4-kl]\""
  jx conn1_p3 40 25 "CUDA_DEVICE_MAX_CONNECTIONS=1 MKERNEL_OP_TIMEOUT=10 timeout 38 python3 -m pytest -x -q -rA -p no:cacheprovider \"$T[w2n2-p3-kl]\""
}
case "${CALL:-A}" in
A) jobs_a ;;
B) jobs_b ;;
AB)  # the pack restored: both in one call (S19_DROP from the tests' results of this call)
  jobs_a
  grep -q "job p4_test: rc=0" "$summary" || S19_DROP=p4
  grep -q "job opstream_test: rc=0" "$summary" || S19_DROP="${S19_DROP:+$S19_DROP,}opstream"
  jobs_b ;;
esac
