# Session 40, call A on main (prepared in session 39). If .bp/ is gone (a recreated checkout), this is a cold dev
# build (358 s in s39a) with BP_PACK=1; the rest of the call is Nsight Compute on the native backward after session
# 39's branch-free mask: causal still 0.975-1.005x cuDNN's, d = 64 0.87-0.90x, and removing the mask's compares
# and selects from unmasked steps (s39e) did not pay — so where do the causal and d = 64 steps stall? Source
# counters (SASS-level CSV: per-instruction stall reasons) for dqwarp causal / non-causal at S = 8192 d = 128 and
# non-causal d = 64, to diff per instruction (d = 64 also with its memory sections: at d = 64 the dQ warp's two bulk
# reduce-adds a step are twice d = 128's L2 reduce traffic per FLOP, ~2.4 TB/s at 416 TF/s). Then session 39's
# opt-in MKERNEL_ATTN_BWD_DQ_SUM=1 (d = 64: the two partials summed in shared memory, one reduce-add a step; not yet
# run on a GPU): its test, and its column beside the plain dqwarp one in the same run. Prediction: d = 64 +5-12 %
# if the reduce traffic binds (ncu's L2 throughput near its peak), else within +-1 %.
#   MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s40a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
#   (with a pack: tar xJf .bp/core.tar.xz first and drop BP_PACK; without one carry build/core instead of .bp)
mps_stop
NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
NCU="$NCU_BIN --profile-from-start off --clock-control none --kernel-name regex:attention_bwd_main --import-source yes --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight"
src() {  # src NAME PROFILE_ARGS
  jx src_$1 90 50 "$NCU -f -o /tmp/src_$1 python3 benchmarks/profile_attention.py --what native_bwd --kernel wgmma_ws_dqwarp $2 && $NCU_BIN --import /tmp/src_$1.ncu-rep --page details --print-units base > \$LOGS/src_$1.txt && $NCU_BIN --import /tmp/src_$1.ncu-rep --page source --csv --print-source sass > \$LOGS/src_$1_sass.csv"
}
src causal "--causal --seq 8192"
src noncausal "--seq 8192"
NCU="$NCU --section MemoryWorkloadAnalysis" src d64 "--seq 8192 --head-dim 64"
mps_start
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx tests 90 30 "timeout 88 $P tests/attention/test_attention_backward_native.py"
jx bench_d64 80 40 "timeout 78 python3 benchmarks/bench_attention.py --backward --seqs 8192 --head-dim 64 --iters 10 --native-kernels wgmma,wgmma_ws_dqwarp,wgmma_ws_dqwarp:dqsum"
