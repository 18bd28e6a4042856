# Session 39, call C on branch bwd-mask-split, second form (s39b measured the first: the mask as a loop copy of its own
# gained causal +1.9 / +2.1 % but cost non-causal -4.8 / -4.3 %, GPU time, dqwarp, S = 8192 MHA / GQA). Now the mask
# runs last, on the packed 16-bit P and dS, behind a warpgroup-uniform branch; the exponentials, dS and packing stay
# one straight block as on main. Prediction: causal +3-6 %, non-causal +0-1 %. .bp/ = s39a's pack (the first form):
# the header's four TUs rebuild (~75 s). A = the branch: tests, rows (MHA 4k/8k/16k, GQA 8k, d = 64 8k); B = main's
# csrc (patch -R, rebuild) and the same rows.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s39c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
BENCH="python3 benchmarks/bench_attention.py --backward --iters 10 --native-kernels wgmma,wgmma_ws_dqwarp"
rows() {  # rows SIDE
  jx bench_$1 100 50 "timeout 98 $BENCH --seqs 4096,8192,16384"
  jx bench_$1_gqa 60 30 "timeout 58 $BENCH --seqs 8192 --kv-heads 8"
  jx bench_$1_d64 60 30 "timeout 58 $BENCH --seqs 8192 --head-dim 64"
}
jx tests_a 90 30 "timeout 88 $P tests/attention/test_attention_backward_native.py -k 'matches or ring_mode or tile_order'"
rows a
jx build_b 170 150 "patch -R -p1 < .ci/jobs/s39a_branch_csrc.patch && python3 -m pip install -v --no-build-isolation --no-deps -e . > \$LOGS/build_b.log 2>&1 && touch /tmp/b_ok"
[ -f /tmp/b_ok ] && rows b
