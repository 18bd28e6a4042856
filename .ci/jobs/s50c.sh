# Session 50, call C (branch s50-cross-odirect): the timeline (bit 23) of the cross-tile walks beside s50b's bases.
# s50b (H100, 8784008 = 395400 + bit 23, S = 4096 keys): per tile gap 730, Q wait 243, first block 2424, loop
# 82282 (2740 a block), last PV 775, epilogue 2076 cycles: 6250 outside the loop = c_t 1.28 blocks; the tensor
# cores' idle stretch at the boundary ~ the epilogue after the meet + gap + Q wait + half the first block.
# Predictions (before the run): tests bit for bit 395400. 15075464 (6686856 + bit 23: O in a V stage, one Q stage):
# first 0 on carried tiles, the carried turn ("lastpv") ~1.3-1.6 loop blocks, epilogue ~2000 as the base's (the
# meet stays), loop/block within 1% of 395400's 2740. 10897544 (2508936 + bit 23: O from registers, Q x2, K 2):
# epilogue ~600-1000 (no meet, no stmatrix / TMA), loop/block +1..+3% (K 2 stages). If c_t does not fall below
# the base's 1.28 blocks for either, the boundary's idle time moved into the loop (a wait per block) rather than
# away: the per-block loop figures say which.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s50c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=20 bash .ci/gpu-dev
# This call's tree: the code of 2be1134 (the call was started with the label of the commit before it, 84859f0,
# whose timeline builds it also holds; only this job file differs from 2be1134).
export MKERNEL_COMMIT=2be1134
# Bit 24 (17172616 / 18516104, timeline 25561224 / 26904712): predicted gap 730 -> <150 cycles a tile and the
# total per tile down by ~400-600 (the divisions run while warpgroup 0 waits at the epilogue's meet); the bench
# columns within noise of the bases (+0.3..+0.7% at 4096).
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx timeline_tests 90 40 "timeout 85 $P -x tests/attention/test_timeline.py"
jx timeline 60 25 "timeout 55 python3 benchmarks/attention_timeline.py --variants 8784008,25561224,15075464,10897544,10127496,26904712"
jx bench_early 60 30 "timeout 55 python3 benchmarks/bench_attention.py --variants 17172616,395400,18516104,1738888 --seqs 4096,8192 --modes nc --skip-alt --iters 20"
