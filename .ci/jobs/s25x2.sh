# For the next nvidia-h200-x2 loan, after s24g has passed on one H200 (branch moe-overlap merged): the overlapped
# MoE dispatch with a GPU per rank (predicted at the 32k row: 0.85x -> ~0.93x compute alone; 8k: 0.82x -> ~0.9x),
# against the gather alone in the same call; then ring attention's send variants (s24e) and its key chunks per
# shard (session 25: 4 instead of 16 made the hooked launch 5-13 % faster on one whole GPU; the fused ring on two
# GPUs is where it should show, session 24 having found its engine phase 2-26 % over the ceiling's).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=400 JOBS=.ci/jobs/s25x2.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
mps_stop
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx overlap_tests 60 30 "timeout 58 $P $M -k 'overlapped_rows[2] or graph_replay_overlapped'"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 20"
jx table_overlap 70 40 "MKERNEL_MOE_OVERLAP=1 timeout 68 $B"
jx table_gather 70 40 "timeout 68 $B"
for c in 8 32; do jx table_overlap_send$c 70 40 "MKERNEL_MOE_OVERLAP=1 MKERNEL_MOE_OVERLAP_SEND_CTAS=$c timeout 68 $B"; done
jx ring_variants 150 60 "timeout 148 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --variants base,kernel,send4,k-static,static,engine,c-base --no-phases --timeout 140"
jx ring_chunks4 70 40 "MKERNEL_RING_CHUNKS=4 timeout 68 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --no-phases --timeout 60"
jx ring_chunks16 70 40 "MKERNEL_RING_CHUNKS=16 timeout 68 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --no-phases --timeout 60"
