# Session 51, call F: the 4 MiB sections (non-causal plain default since 611b7a4) on the shapes s51c-e did not time:
# d = 64 (K/V 1 MiB a head at 4096 keys: 4 heads a section, 24 MiB held 24) and GQA 32/8 at d = 128 (8 MiB of K/V for
# 32 query heads at 4096: a section's bytes count per query head, so 4 MiB = 2 query heads; 24 MiB = 12).
# Predictions (before the run): d = 64 non-causal 4096: the default >= 0:24 (+1..+4%: at d = 64 the L2 was the busiest
# unit, s39's ncu); GQA: default within 1% of 0:24 (the shared K/V already fit: 3 K/V heads for 12 query heads).
# (No cuDNN column for GQA: SDPA would need K/V expanded to 32 heads.)
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s51f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=30 bash .ci/gpu-dev
jx power_d64 45 30 "timeout 43 python3 benchmarks/attention_power.py --seq 4096 --head-dim 64 --variants 0,0:24 --backends cudnn --window 1.5 --rounds 3"
jx power_gqa 45 30 "timeout 43 python3 benchmarks/attention_power.py --seq 4096 --heads-kv 8 --variants 0,0:24 --backends= --window 1.5 --rounds 3"
jx power_d64_8k 45 30 "timeout 43 python3 benchmarks/attention_power.py --seq 8192 --head-dim 64 --variants 0,0:24 --backends cudnn --window 1.5 --rounds 3"
