# Session 29, call B (warm, REUSE_BUILD=1): s28b — the ring at W=2/4/8 (kWholeChunks=4 default), MoE default
# (send_token_item dedupe) and fused (W=4/8, graph replay, a killed rank), the attention hook tests.
source .ci/jobs/s28b.sh
