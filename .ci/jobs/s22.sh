# Session 22, call A: builds 2cdd20c (env_flag for the five MoE 0|1 knobs; compile-checked only so far), runs
# the one-node MoE tests (W=2/4/8, graph replay) and the knob-sensitive tests across nodes (the previous stream
# placement, the combine variants), then the issue-14 one-node table (seed 8k, Mixtral 8k, seed 32k at W=2:
# targets >= 1.0x unfused everywhere, >= 0.85x compute alone at 32k) — last measured at 449e151 (2026-12-02).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=480 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx one_node 120 40 "timeout 118 $P $M -k 'cuda_ranks_match_reference or graph_replay'"
jx knobs 150 40 "timeout 148 $P $M -k 'previous_streams or combine_variants'"
jx table 200 60 "timeout 198 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 20"
