# Session 22, call H (one H200): the lean bench once more after the buffer's carried combine stopped copying the
# weights before each replay (call G read 0.833x, no gain over its all-gathering combine).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22h.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=150 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 20 --lean --moe14"
jx bench 60 30 "timeout 58 $B"
jx bench2 60 30 "timeout 58 $B"
