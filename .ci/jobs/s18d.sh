# Session 18 call D (NOTES "Session 18, moe15"): the headed gather's diagnosis marks (main_issued,
# pushed, head) beside sent / received / routing, in the lean moe14 bench (default environment).
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
jx moe15_marks 40 25 "timeout 38 $B"
