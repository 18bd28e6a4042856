# Session 39, call B on branch bwd-mask-split (.bp/ = s39a's dev-build pack of the branch: no build steps). The mask
# split's A/B in one run: A's rows at S = 8192 (MHA, both modes; GQA 32/8), then B = main's csrc (patch -R,
# incremental rebuild of the four backward TUs) and the same rows; then the ring test on auto's native rows (W = 2).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s39b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
BENCH="python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels wgmma,wgmma_ws_dqwarp"
jx bench_a 110 60 "timeout 108 $BENCH"
jx bench_a_gqa 80 50 "timeout 78 $BENCH --kv-heads 8"
jx build_b 170 150 "patch -R -p1 < .ci/jobs/s39a_branch_csrc.patch && python3 -m pip install -v --no-build-isolation --no-deps -e . > \$LOGS/build_b.log 2>&1 && touch /tmp/b_ok"
[ -f /tmp/b_ok ] && jx bench_b 110 60 "timeout 108 $BENCH"
[ -f /tmp/b_ok ] && jx bench_b_gqa 80 50 "timeout 78 $BENCH --kv-heads 8"
jx ring_auto 90 40 "timeout 88 $P tests/gpu/test_ring_attention.py -k auto_native_rows"
