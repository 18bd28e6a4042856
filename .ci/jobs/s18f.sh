# Session 18 call F (NOTES "Session 18, moe15"): the lean moe14 bench with the caller's work on the legacy
# default stream (as before) and on a stream of its own (BENCH_CALLER_STREAM=side).
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
jx moe15_default_stream 30 20 "timeout 28 $B"
jx moe15_side_stream 30 20 "BENCH_CALLER_STREAM=side timeout 28 $B"
