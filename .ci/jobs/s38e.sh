# Session 38, call E on main (the budget's last ~90 s; csrc = the s38a pack's): s39a's Nsight Compute source counters
# alone, the dqwarp kernel causal and non-causal at S = 8192 (SASS-level CSVs in the logs, to diff per instruction).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s38e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=85 bash .ci/gpu-dev
mps_stop
NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
NCU="$NCU_BIN --profile-from-start off --clock-control none --kernel-name regex:attention_bwd_main --import-source yes --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight"
for c in causal noncausal; do
  flag=$([ $c = causal ] && echo --causal)
  jx src_$c 45 25 "$NCU -f -o /tmp/src_$c python3 benchmarks/profile_attention.py --what native_bwd --kernel wgmma_ws_dqwarp $flag --seq 8192 && $NCU_BIN --import /tmp/src_$c.ncu-rep --page details --print-units base > \$LOGS/src_$c.txt && $NCU_BIN --import /tmp/src_$c.ncu-rep --page source --csv --print-source sass > \$LOGS/src_${c}_sass.csv"
done
