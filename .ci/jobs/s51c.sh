# Session 51, call C: the L2 section budget of the forward's tile order (MKERNEL_ATTN_L2_SECTION_MB, default 24).
# s51b (attention_power.py, sustained 2 s windows): every kernel at the H100's 700 W cap (reason 0x4, SW power cap);
# at 4096 ours 0.974x cuDNN in time, 0.994x per cycle, 0.980x the clock: the gap is the clock, i.e. energy per unit
# of work. Session 36's Nsight Compute profiles of the S = 4096 forward (results/ncu/h100_20261206_*_fwd.txt): ours
# DRAM 21.75% of peak (729 GB/s, ~1.2 GB a call) at an L2 hit rate of 77.45%; cuDNN's 9.90% (332 GB/s, 0.53 GB = Q +
# K + V + O once) at 91.70%. Ours re-reads K/V from DRAM: a 24 MiB section at 4096 keys is 12 heads whose K/V (2 MiB
# each) all 132 CTAs read at once.
# Predictions (before the run): ncu at 4096, budget 8 MiB (4 heads): L2 hit >= 88%, DRAM read <= 0.7 GB (24 MiB: ~77%,
# ~1.1 GB as session 36). attention_power at 4096: 0:8 and 0:4 run at cuDNN's clock (+1..+2% over 0:24) and 0.99-1.00x
# cuDNN in time; 0:12 between. At 8192 (K/V 4 MiB a head: 24 MiB = 6 heads) a smaller gain (+0.5..+1%).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s51c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=40 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx l2_tests 60 25 "timeout 55 $P tests/attention/test_l2_sections.py"
jx power_4096 100 40 "timeout 95 python3 benchmarks/attention_power.py --seq 4096 --variants 0,0:12,0:8,0:4 --backends cudnn --window 2 --rounds 3"
jx power_8192 90 40 "timeout 85 python3 benchmarks/attention_power.py --seq 8192 --variants 0,0:8,0:4 --backends cudnn --window 2 --rounds 3"
mps_stop
NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
NCU="$NCU_BIN --profile-from-start off --clock-control none --metrics $M --csv --print-units base"
jx ncu_l2_24 45 20 "$NCU python3 benchmarks/profile_attention.py --what engine_fwd --seq 4096"
jx ncu_l2_8 45 20 "MKERNEL_ATTN_L2_SECTION_MB=8 $NCU python3 benchmarks/profile_attention.py --what engine_fwd --seq 4096"
jx ncu_cudnn 45 20 "$NCU python3 benchmarks/profile_attention.py --what cudnn_fwd --seq 4096"
