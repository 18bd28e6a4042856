# Session 42, call G: why the causal forward falls to 0.96x cuDNN at S = 32768 (0.995x at 16k; s42f): Nsight Compute's
# L2 hit rate, DRAM bytes and SM throughput of the engine's causal forward at 16k and 32k beside cuDNN's at 32k.
# Prediction (benchmarks/attention_l2_model.py: the schedule reuses K/V better at 32k): our L2 hit rate does not fall
# from 16k to 32k; if it does, the hardware L2 is not the model's; if not, the cause is in the step (SASS source counters next).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s42g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=380 bash .ci/gpu-dev
mps_stop
NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
NCU="$NCU_BIN --profile-from-start off --clock-control none --metrics $M --csv --print-units base"
jx ncu_ours16 60 20 "$NCU python3 benchmarks/profile_attention.py --what engine_fwd --causal --seq 16384"
jx ncu_ours32 60 20 "$NCU python3 benchmarks/profile_attention.py --what engine_fwd --causal --seq 32768"
jx ncu_cudnn32 60 20 "$NCU python3 benchmarks/profile_attention.py --what cudnn_fwd --causal --seq 32768"
jx ncu_cudnn16 60 20 "$NCU python3 benchmarks/profile_attention.py --what cudnn_fwd --causal --seq 16384"
jx fwd32c 60 20 "timeout 58 python3 benchmarks/bench_attention.py --seqs 16384,32768 --modes c --iters 10 --skip-alt"
# Between them: K + V of a head is 10 / 12 / 14 MiB at 20k / 24k / 28k keys, so an L2 section (24 MiB budget,
# tile_scheduler.hpp) holds 2 / 2 / 1 heads: a ratio that falls only where a section is one head points at the sections.
jx fwd_mid 60 20 "timeout 58 python3 benchmarks/bench_attention.py --seqs 20480,24576,28672 --modes c --iters 10 --skip-alt"
# The causal mainloop variants beside the default (6280 = 136 claimed): 136 static tiles (no claims), 9 / 4105 (the
# causal default before s11: V one stage deeper, unclaimed / claimed), 1160 (masked and visible blocks in two loops),
# 22664 (O from registers): does any of them hold its 16k rate at 32k?
jx fwd32v 90 20 "timeout 88 python3 benchmarks/bench_attention.py --seqs 16384,32768 --modes c --iters 10 --skip-alt --variants 136,9,4105,1160,22664"
# The backward's host breakdown again with the parts in a shuffled order each round: does the body's ~110 µs over the
# bare kernel op (s42b-e, a fixed order) survive? If not, the wall gap left is the autograd engine's, as SDPA's.
jx host_c 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 1"
jx host_nc 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 0"
# Written after s42f, not yet run: an empty batch (b = 0) on CUDA gives empty results and gradients (was an error).
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx empty_batch 60 20 "timeout 58 $P tests/attention/test_attention_engine.py -k 'empty_batch or gradients_match or through_lse'"
mps_start  # the multi-rank test shares the GPU through MPS again
jx ring_empty 100 30 "timeout 98 $P tests/gpu/test_ring_attention.py -k 'empty_batch or lse_gradient'"
