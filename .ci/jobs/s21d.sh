# Session 21, call D: MoEMLP on CUDA against the dense reference (new tests); the pipelined combine's
# routes through the MoE's own exchange (MKERNEL_MOE_COMBINE_ROUTES=exchange, opt-in): its tests, then
# the lean bench twice (candidate mkernel_combine_routesx and its phases beside the default's).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=360 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 12 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx mlp 80 30 "timeout 78 $P $M -k mlp_cuda"
jx routes 80 30 "timeout 78 $P $M -k routes_exchange"
jx bench 60 30 "timeout 58 $B"
jx bench2 60 30 "timeout 58 $B"
