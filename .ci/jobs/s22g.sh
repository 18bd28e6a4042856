# Session 22, call G (one H200): MoEBuffer carries the weights too (dispatch_gemm(x, idx, w1, topk_weights);
# its combine then uses the carried routes; MoEMLP's buffered forward passes them). The buffer's tests (the
# existing three and w2n2/w4n4 with the weights), MoEMLP's CUDA tests, then the lean bench (the buffer's carried
# combine beside its all-gathering one).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=300 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 20 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx buffer 130 40 "timeout 128 $P $M -k 'buffer or mlp_cuda'"
jx bench 60 30 "timeout 58 $B"
