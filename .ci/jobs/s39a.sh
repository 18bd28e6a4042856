# Session 39, call A on main (prepared in session 38; csrc = the s38a pack's in .bp/: no build steps). (1) Issue 13's
# causal backward gap is per step (session 38: +15 % warp instructions and +12.7 % SM cycles per causal step against
# non-causal; cuDNN +4.8 % cycles; persistence did not help): Nsight Compute's source counters on the dqwarp kernel,
# causal and non-causal at S = 8192, SASS-level CSVs in the logs to diff per instruction. (2) The whole GPU suite in
# parts (the rest of the budget).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s39a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
mps_stop
NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
NCU="$NCU_BIN --profile-from-start off --clock-control none --kernel-name regex:attention_bwd_main --import-source yes --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight"
for c in causal noncausal; do
  flag=$([ $c = causal ] && echo --causal)
  jx src_$c 120 60 "$NCU -f -o /tmp/src_$c python3 benchmarks/profile_attention.py --what native_bwd --kernel wgmma_ws_dqwarp $flag --seq 8192 && $NCU_BIN --import /tmp/src_$c.ncu-rep --page details --print-units base > \$LOGS/src_$c.txt && $NCU_BIN --import /tmp/src_$c.ncu-rep --page source --csv --print-source sass > \$LOGS/src_${c}_sass.csv"
done
mps_start
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx suite_attention 150 60 "timeout 148 $P tests/attention"
jx suite_gemm 120 60 "timeout 118 $P tests/gemm"
jx suite_gpu 240 60 "timeout 238 $P tests/gpu"
