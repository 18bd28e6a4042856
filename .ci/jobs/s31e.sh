# Session 31, call E (cold): where the attention backward's wall-time gap to SDPA's own cuDNN backward goes (host
# enqueue time of one call and a profiler table of each), then the default MoE table once more on this card.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s31e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
jx bwd_host 60 30 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40"
jx table_default2 60 30 "timeout 58 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 10"
