# Session 39, call D on branch bwd-mask-split, third form. s39b/c: a branch around the mask (as a loop copy, or last on
# the packed values) cost non-causal steps 4.5-6 % (GPU time, dqwarp) though it ran no mask code there: the branch
# itself, not the mask's instructions, set the schedule. Now no branch: the mask in offsets from the thread's first
# value, the key bound folded into the diagonal's room per row offset, every room open on a step without a mask — one
# compare and one select a value (the causal step region 689 -> 646 SASS instructions a thread, PLOP3 34 -> 0;
# non-causal 606 -> 607). Prediction: causal +2-4 %, non-causal 0 +- 1 %. .bp/ = s39a's pack: 4 TUs rebuild.
# A = the branch: tests, rows (MHA 4k/8k/16k, GQA 8k, d = 64 8k); B = main's csrc (patch -R, rebuild), the same
# rows; then A again (patch, rebuild) at 8k MHA / GQA to bound the drift.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s39d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
BENCH="python3 benchmarks/bench_attention.py --backward --iters 10 --native-kernels wgmma,wgmma_ws_dqwarp"
rows() {  # rows SIDE
  jx bench_$1 100 50 "timeout 98 $BENCH --seqs 4096,8192,16384"
  jx bench_$1_gqa 60 30 "timeout 58 $BENCH --seqs 8192 --kv-heads 8"
  jx bench_$1_d64 60 30 "timeout 58 $BENCH --seqs 8192 --head-dim 64"
}
rebuild() {  # rebuild NAME PATCH_FLAGS
  rm -f /tmp/$1_ok
  jx build_$1 170 100 "patch $2 -p1 < .ci/jobs/s39a_branch_csrc.patch && python3 -m pip install -v --no-build-isolation --no-deps -e . > \$LOGS/build_$1.log 2>&1 && touch /tmp/$1_ok"
}
jx tests_a 90 30 "timeout 88 $P tests/attention/test_attention_backward_native.py -k 'matches or ring_mode or tile_order or repeats'"
rows a
rebuild b -R
[ -f /tmp/b_ok ] && rows b
rebuild a2 ""
[ -f /tmp/a2_ok ] && jx bench_a2 60 30 "timeout 58 $BENCH --seqs 8192"
[ -f /tmp/a2_ok ] && jx bench_a2_gqa 60 30 "timeout 58 $BENCH --seqs 8192 --kv-heads 8"
[ -f /tmp/a2_ok ] && jx ring_native 80 40 "timeout 78 $P tests/gpu/test_ring_attention.py -k \"pinned_paths and native or auto_native_rows\""
