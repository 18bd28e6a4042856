# Session 21, call B: MoEBuffer with direct graphs (the same tensors call after call: no copy-in) beside
# the static graph (x and topk_idx copied in); its GPU tests (mixed paths across ranks), then the lean bench.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=300 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 12 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx buffer 100 40 "timeout 98 $P $M -k buffer"
jx bench 90 40 "timeout 88 $B"
jx bench2 90 40 "timeout 88 $B"
