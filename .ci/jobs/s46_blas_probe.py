"""Session 46: which half-precision GEMMs does torch 2.11 (cu130) get wrong on an MPS share of an H100?

s45d: at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 (42 SMs) torch.mm itself was wrong, 2-D and contiguous
(0.47 relative error at C = 32, NaN at 128 x 1024 x 1024), not only the one-batch bmm. Here, one process
per (share, BLAS library preference, workspace): the weight-gradient form g^T x (reduction over few rows,
transposed view and contiguous), nn.Linear's forward x w^T and data gradient g w, in bf16, fp16 and fp32
(TF32 off), against float64; and the mkernel engine's GEMM on the same operands where its rules hold.
Prints the failures and one summary line: PROBE <share> <lib> <ws> worst {...}.
"""
import os

import torch

lib = os.environ.get("PROBE_LIB", "default")
if lib != "default":
    torch.backends.cuda.preferred_blas_library(lib)
torch.backends.cuda.matmul.allow_tf32 = False
engine = os.environ.get("PROBE_ENGINE", "0") == "1"
if engine:
    import mkernel
torch.manual_seed(0)
worst: dict[str, float] = {}
fails = 0


def check(name: str, shape: tuple, dt: torch.dtype, out: torch.Tensor, want: torch.Tensor) -> None:
    global fails
    fin = bool(torch.isfinite(out).all())
    rel = float((out.double() - want).norm() / want.norm()) if fin else float("inf")
    key = f"{name}/{str(dt)[6:]}"
    worst[key] = max(worst.get(key, 0.0), rel)
    tol = 1e-5 if dt == torch.float32 else 2e-2
    if rel > tol:
        fails += 1
        print("FAIL", name, shape, str(dt)[6:], f"rel {rel:.3e}", flush=True)


for dt in (torch.bfloat16, torch.float16, torch.float32):
    for c, f, h in ((27, 368, 496), (32, 368, 496), (9, 368, 496), (128, 1024, 1024), (4096, 1024, 1024)):
        g = torch.randn(c, f, device="cuda").to(dt)
        x = torch.randn(c, h, device="cuda").to(dt)
        want = g.double().t() @ x.double()
        check("wgrad_t", (c, f, h), dt, g.t().mm(x), want)
        check("wgrad_contig", (c, f, h), dt, g.t().contiguous().mm(x), want)
        if engine and dt != torch.float32 and c % 8 == 0:
            check("engine_wgrad", (c, f, h), dt, mkernel.gemm(g.t().contiguous(), x.t().contiguous()), want)
    for m, n, k in ((128, 1024, 1024), (333, 1024, 4096), (4096, 4096, 4096), (8, 4096, 4096)):
        x = torch.randn(m, k, device="cuda").to(dt)
        w = torch.randn(n, k, device="cuda").to(dt)
        gr = torch.randn(m, n, device="cuda").to(dt)
        check("fwd", (m, n, k), dt, torch.nn.functional.linear(x, w), x.double() @ w.double().t())
        check("dgrad", (m, n, k), dt, gr @ w, gr.double() @ w.double())
        if engine and dt != torch.float32:
            check("engine_fwd", (m, n, k), dt, mkernel.gemm(x, w), x.double() @ w.double().t())
torch.cuda.synchronize()
share = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "none")
bad = {k: f"{v:.2g}" for k, v in worst.items() if v > (1e-5 if k.endswith("float32") else 2e-2)}
print("PROBE", share, lib, os.environ.get("CUBLAS_WORKSPACE_CONFIG", "-"),
      "sms", torch.cuda.get_device_properties(0).multi_processor_count, "fails", fails, "bad", bad, flush=True)
