# Session 38, call B on main (csrc = the s38a pack's: no build steps). (1) The backward's new auto rule (native on
# non-causal d = 128 rows with S >= 4096, MKERNEL_ATTN_BWD=torch pin) and the gradient tests around it. (2) Where the
# rule's threshold lies: the native backward vs cuDNN at S = 1024 / 2048 non-causal. (3) Nsight Compute on the causal
# backward (issue 13: wgmma_ws_dqwarp 0.95-0.97x cuDNN in GPU time, non-causal at parity): ours beside cuDNN's at
# S = 8192. (4) The ring tests through session 37's rank_ring_attention helpers (refactored after its GPU run).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s38b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
A=tests/attention
jx attn_tests 150 40 "timeout 148 $P $A/test_attention_backward_native.py $A/test_attention_engine.py -k 'auto or torch or mode or autograd or gradients or choice'"
jx bwd_short 90 40 "timeout 88 python3 benchmarks/bench_attention.py --backward --seqs 1024,2048 --iters 10 --modes nc --native-kernels wgmma,wgmma_ws_dqwarp"
mps_stop
NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
NCU="$NCU_BIN --profile-from-start off --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats"
jx prof_native_causal 110 60 "$NCU -f -o /tmp/prof_nc python3 benchmarks/profile_attention.py --what native_bwd --kernel wgmma_ws_dqwarp --causal --seq 8192 && $NCU_BIN --import /tmp/prof_nc.ncu-rep --page details --print-units base > \$LOGS/prof_native_causal.txt"
jx prof_cudnn_causal 110 60 "$NCU -f -o /tmp/prof_cc python3 benchmarks/profile_attention.py --what cudnn_bwd --causal --seq 8192 && $NCU_BIN --import /tmp/prof_cc.ncu-rep --page details --print-units base > \$LOGS/prof_cudnn_causal.txt"
mps_start
jx ring_tests 150 60 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'matches_reference or other_head_dims'"
