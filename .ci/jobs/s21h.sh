# Session 21, call H: the demo with the new MoE defaults (W=2 over 2 emulated nodes: the headed dispatch; W=4
# over 2: the substrate path), then the lean bench once more.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21h.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=240 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 12 --lean --moe14"
jx demo22 70 30 "timeout 68 python3 -m mkernel demo --world 2 --nodes 2 --require-all"
jx demo42 80 30 "timeout 78 python3 -m mkernel demo --world 4 --nodes 2 --require-all"
jx bench 40 20 "timeout 38 $B"
