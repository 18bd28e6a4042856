# Session 50, call P (main): the checkout came back without .bp/ (and without session 49's branch), so this call
# builds the dev build (MKERNEL_DEV_BUILD=1) from nothing and writes a new build pack (BP_PACK=1) for the next calls,
# then, if time is left, a baseline for the cross-tile work: 395400, the default and cuDNN at S = 4096 non-causal.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s50p.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=585 TAIL_LINES=12 bash .ci/gpu-dev
jx base_4096 70 45 "timeout 65 python3 benchmarks/bench_attention.py --variants 395400 --seqs 4096 --modes nc --skip-alt --iters 20"
