# Session 31, call D (cold; .bp/ matches csrc, Python-only changes): the attention backward's choice cached (host
# cost), the backward bench with a GPU-time reading beside the wall one; the engine's gradient tests and the new
# cache test; the ring grad tests after the per-block change; the across-node MoE yardstick (50 GB/s link) twice,
# the auto verdict at the Mixtral-like shape, the default path's table.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s31d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
N="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 20 --lean --moe14"
jx bwd_bench 150 60 "timeout 148 python3 benchmarks/bench_attention.py --backward --seqs 4096,8192 --iters 10 --native-kernels wgmma,wgmma_ws"
jx attn_tests 120 40 "timeout 118 $P tests/attention/test_attention_engine.py -k 'gradients or choice_cache or graph'"
jx ring_grad 60 40 "timeout 58 $P tests/gpu/test_ring_attention.py -k 'matches_reference and 2'"
jx nodes_a 60 30 "timeout 58 $N"
jx nodes_b 60 30 "timeout 58 $N"
jx mixtral_auto 50 30 "MKERNEL_MOE_FUSED=auto MKERNEL_FUSED_VERBOSE=1 timeout 48 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes mixtral_e8_top2_8k --iters 10"
jx table_default 60 30 "timeout 58 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 10"
