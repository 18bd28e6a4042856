# Session 29, call B (warm, REUSE_BUILD=1): the fused MoE smoke, then s28b — the ring at W=2/4/8 (kWholeChunks=4
# default), MoE default (send_token_item dedupe) and fused (W=4/8, graph replay, a killed rank), attention hooks.
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx moe_fused_smoke 70 30 "timeout 68 $P -x tests/gpu/test_moe_ranks.py -k 'ranks_fused and 2'"
source .ci/jobs/s28b.sh
