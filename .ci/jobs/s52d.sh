# Session 52, third call: (1) the hooked non-causal (ring) kernels' L2 sections 24 -> 4 MiB (session 52's s52b: l2s4
# 1.07-1.16x the 24 MiB order at W = 2 / 4 under MPS): the ring's GPU tests, then the ring bench's default columns
# (prediction: `fused` and `ceiling` at W = 2 within 2% of s52b's l2s4 / c-l2s4 columns: 4.25 / 4.02 ms mha, 7.85 /
# 7.73 gqa). (2) The GEMM engine at the power cap: s52a's 8192^3 ran 0.945x cuBLAS sustained (tuned plan
# ping_128x128_c1x2/s4/m, 1.69 ms at 1380 MHz, 692 W) while the short bench calls it parity. A 128x256 / 256x128
# tile reads 25% fewer L2 -> SMEM bytes per flop than 128x128 and multicast halves one operand's L2 reads.
# Prediction: coop_128x256_c2x1 / coop_256x128_c1x2 per joule +3..+6% over the tuned plan at 8192^3 and at
# 8192x7168x8192, i.e. 0.98-1.01x cuBLAS sustained; cuBLAS's kernel named by the profiler.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s52d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
jx tests 170 60 "timeout 165 $P tests/attention/test_ring_compute_alone.py tests/attention/test_l2_sections.py tests/gpu/test_ring_attention.py -k 'not killed and not eight and not other_head_dims and not pinned_paths'"
jx cublas_names 40 20 "timeout 38 python3 -c \"
import torch
from torch.profiler import profile, ProfilerActivity
for m, n, k in ((8192, 8192, 8192), (8192, 7168, 8192), (333, 8192, 8192)):
    a = torch.randn(m, k, device='cuda', dtype=torch.bfloat16); b = torch.randn(n, k, device='cuda', dtype=torch.bfloat16)
    for _ in range(3): torch.matmul(a, b.T)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        torch.matmul(a, b.T); torch.cuda.synchronize()
    print(m, n, k, [e.name for e in p.events() if e.device_type.name == 'CUDA'])
\""
PL="coop_128x256_c2x1/s4/m,coop_256x128_c1x2/s4/n,coop_128x256_c1x2/s4/m,coop_256x128_c2x1/s4/m"
jx gemm_power 150 60 "timeout 148 python3 benchmarks/gemm_power.py --shapes '8192,8192,8192;8192,7168,8192' --plans $PL --window 1.5 --rounds 3"
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx w2 90 40 "timeout 88 $B --world 2 --iters 20 --variants base,c-base"
