# Session 50, call B (branch s50-cross-odirect): where a non-causal tile's per-tile cost goes. s50a's rows at a fixed
# tile count (S = 4096, b = 4, h = 32) over key lengths put mkernel's per-tile fixed cost at ~1 KV block (1738888,
# 277 keys from the 2304 / 4608 rows) against cuDNN's ~0.8 (111 keys), and the cross-tile variants did not lower it
# (2508936 at 2304 keys 608 vs 395400's 616 TF/s). The measurement builds of bit 23 (8784008 = 395400 + bit 23,
# 10127496 = 1738888 + bit 23; the block loop's SASS 631 / 707 instructions against the bases' 631 / 705) sum the
# SM cycles of each tile's phases.
# Predictions (before the run): tests bit for bit the bases. Per tile at 4096 keys: the loop ~95% of the cycles;
# first block ~1.0-1.5 loop blocks (S GEMM + softmax with nothing beside them), last PV ~0.5, epilogue ~0.3-0.6,
# Q wait ~0 (loaded under the previous tile), gap ~0; c_t (outside the loop, in loop blocks, beyond the blocks'
# own share) ~1.0-1.5 blocks.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s50b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=14 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx timeline_tests 90 40 "timeout 85 $P -x tests/attention/test_timeline.py tests/attention/test_cross_tile.py -k 'timeline or back_to_back'"
jx timeline 60 25 "timeout 55 python3 benchmarks/attention_timeline.py"
