# Session 35, call A (prepared in session 34; main's csrc = the pack's but ring_attention.cpp: one step).
# (1) mkernel.nn.ContextParallelAttention on the GPU (written in session 34 on the CPU: host tests W = 2 / 4 pass).
# (2) The ring file's one-node defaults again (the split inside a node by default since session 34).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s35a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx layer_test 90 30 "timeout 88 $P tests/gpu/test_ring_attention.py -k 'context_parallel'"
jx ring_w 150 30 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'matches_reference or world_eight'"
# (3) Nsight Compute on the native backward (issue 13: 0.80-0.85x cuDNN) beside cuDNN's, and the forward engine
# beside cuDNN at S = 4096 non-causal (0.98x on H200): where each kernel's time goes (speed of light, warp stalls,
# pipes). ncu profiles no MPS client: the daemon stopped for these jobs. Reports as text in the logs.
mps_stop
NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
NCU="$NCU_BIN --profile-from-start off --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats"
for w in native_bwd cudnn_bwd; do
  jx prof_$w 120 60 "$NCU -f -o /tmp/prof_$w python3 benchmarks/profile_attention.py --what $w --seq 8192 && $NCU_BIN --import /tmp/prof_$w.ncu-rep --page details --print-units base > \$LOGS/prof_$w.txt"
done
for w in engine_fwd cudnn_fwd; do
  jx prof_$w 90 50 "$NCU -f -o /tmp/prof_$w python3 benchmarks/profile_attention.py --what $w --seq 4096 && $NCU_BIN --import /tmp/prof_$w.ncu-rep --page details --print-units base > \$LOGS/prof_$w.txt"
done
mps_start
