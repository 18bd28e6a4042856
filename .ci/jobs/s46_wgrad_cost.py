"""Session 46: what a weight gradient g^T x costs on the engine (two transposes + mkernel.gemm) against
torch.matmul on the whole GPU, bf16, Megatron-sized shapes: whether MKERNEL_LOCAL_GEMM=engine could be more
than the fallback for broken shares. Medians of CUDA-event timings, 20 reps after 5 warm-ups."""
import torch

from mkernel import _local_gemm as lg  # importing mkernel loads torch.ops.mkernel


def median_ms(fn, reps=20):
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


for m, n, k in ((8192, 4096, 4096), (16384, 1024, 4096), (4096, 14336, 4096)):
    g = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    t_torch = median_ms(lambda: g.t().matmul(x))
    t_engine = median_ms(lambda: lg.engine_nt(g.t().contiguous(), x.t().contiguous()))
    gt, xt = g.t().contiguous(), x.t().contiguous()
    t_gemm = median_ms(lambda: torch.ops.mkernel.gemm.default(gt, xt))
    print(f"WGRAD m {m} n {n} k {k}: torch {t_torch:.3f} ms, engine with transposes {t_engine:.3f} ms "
          f"({t_torch / t_engine:.2f}x), the GEMM alone {t_gemm:.3f} ms", flush=True)
