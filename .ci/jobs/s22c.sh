# Session 22, call C: the carried routes once more. The demo (its MoE case now passes topk_weights to the
# dispatch) at W=2 over 2 emulated nodes (the headed dispatch, the pipelined combine) and W=4 over 2 (the
# substrate's path); the copy-engine exchange tests call B's job ran out of time on; the lean bench twice
# (mkernel_combine_carried beside mkernel_combine, 20 rounds).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=400 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 20 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx demo22 70 30 "timeout 68 python3 -m mkernel demo --world 2 --nodes 2 --require-all"
jx demo42 80 30 "timeout 78 python3 -m mkernel demo --world 4 --nodes 2 --require-all"
jx ce 70 30 "timeout 68 $P $M -k 'copy_engine_exchange and not alone'"
jx bench1 60 30 "timeout 58 $B"
jx bench2 60 30 "timeout 58 $B"
