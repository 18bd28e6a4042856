# Session 50, call A (branch s50-cross-odirect, after s50p's build pack): the cross-tile variants with O from registers
# (2508936 = 2492552 + bit 14, 6703240 = 6686856 + bit 14), their tests, the pinned bench beside session 49's, and
# the tile-boundary fit: rows at a fixed tile count (S = 4096 queries, b = 4, h = 32) over key lengths that are whole
# blocks of both 128 and 144 keys, for the base, the default's mainloop and cuDNN.
# Predictions (written before the run):
#  - tests: all four cross variants bit for bit 395400.
#  - 2508936 vs 2492552 at S = 4096: +1..+2% (no meet: a warpgroup's epilogue runs under the other's GEMMs; the next
#    Q is resident already, so the shorter epilogue does not turn into a Q wait as it did for 18568 in attn13), i.e.
#    0.995-1.01x 395400; at 8192 half that. 6703240 vs 6686856: -0.5..+1% (one Q stage: the next Q's load is
#    exposed at the boundary once the epilogue is short).
#  - fit (time = a + S_kv x b per row at 4608 / 9216 / 2304 keys): mkernel's a (the per-tile fixed part, in keys of
#    b) 250-400 keys for 395400 / 1738888, cuDNN's 40-120: the 4096 gap is at the boundary; if the a's are equal, it
#    is not, and the per-key rate at short rows is the suspect.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s50a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=12 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
# The cross-tile tests ran in s50p on this tree (53 passed: all four variants bit for bit 395400).
jx bench_cross 130 70 "timeout 125 python3 benchmarks/bench_attention.py --variants 2508936,6703240,2492552,6686856,395400 --seqs 4096,8192 --modes nc --skip-alt --iters 15"
jx tile_fit 110 60 "timeout 105 python3 benchmarks/bench_attention.py --variants 395400,1738888,2508936 --seqs 4096 --kv-lens 2304,4608,9216 --modes nc --skip-alt --iters 15"
jx bench_4096 70 40 "timeout 65 python3 benchmarks/bench_attention.py --variants 2508936,395400 --seqs 4096 --modes nc --skip-alt --iters 30"
