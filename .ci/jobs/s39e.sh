# Session 39, call E on branch bwd-step-split: causal / ring steps without a mask run a copy of the whole step
# compiled without it (the warp-specialized loop picks the copy per step; each copy one straight block — the branch
# inside the step cost 4-6 % in s39b/c). SASS: the unmasked causal step 67 instructions shorter (no ISETP / FSEL), but
# its wgmma descriptors now move through R2UR (45 -> 104) instead of UMOV. Non-causal kernels unchanged (SASS
# identical to main's). Prediction: causal +2..+5 % over main (s39d's A rows: ours / cuDNN 0.985 / 1.005 / 0.994 at
# 4k / 8k / 16k, GQA 0.975); could be negative if the R2UR chains stall. Budget: no B rebuild — compared by the ratio
# to cuDNN in the same run, with the non-causal row (main's SASS) as the run-to-run check.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s39e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=300 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
BENCH="python3 benchmarks/bench_attention.py --backward --iters 10 --native-kernels wgmma,wgmma_ws_dqwarp"
jx tests_e 60 20 "timeout 58 $P tests/attention/test_attention_backward_native.py -k 'matches or ring_mode or tile_order or repeats'"
jx bench_e 60 30 "timeout 58 $BENCH --seqs 8192"
jx bench_e_c 60 30 "timeout 58 $BENCH --seqs 4096,16384 --modes c"
jx bench_e_gqa 50 25 "timeout 48 $BENCH --seqs 8192 --kv-heads 8 --modes c"
jx ring_native 60 30 "timeout 58 $P tests/gpu/test_ring_attention.py -k \"pinned_paths and native\""
