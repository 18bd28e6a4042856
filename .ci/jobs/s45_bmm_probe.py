"""Session 45: torch.bmm (cuBLAS) on the MoE weight gradient's padded operands, alone: g^T [E, F, C]
(a transposed view, C = 27 rows: an odd reduction) times x [E, C, H], bf16, against float64, at the
full GPU and at a third of it (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, what the W = 3 ranks see).
Also torch.mm (2-D: nn.Linear's weight gradient, grad^T @ x) on the same shapes, transposed view
and contiguous, and bmm with g^T contiguous: which calls the reduced share breaks."""
import torch

torch.manual_seed(0)
worst = {}
for e, c, f, h in ((1, 27, 368, 496), (1, 27, 368, 512), (2, 27, 64, 96), (1, 9, 368, 496), (1, 32, 368, 496),
                   (3, 27, 368, 496), (1, 1, 368, 496), (1, 27, 8, 8), (1, 64, 368, 496), (1, 128, 1024, 1024)):
    for dt in (torch.bfloat16, torch.float16):
        g = torch.randn(e, c, f, device="cuda").to(dt)
        x = torch.randn(e, c, h, device="cuda").to(dt)
        want = torch.bmm(g.double().transpose(1, 2), x.double())
        calls = {"bmm_t": lambda: torch.bmm(g.transpose(1, 2), x),
                 "bmm_contig": lambda: torch.bmm(g.transpose(1, 2).contiguous(), x),
                 "mm_t": lambda: torch.stack([g[i].t().mm(x[i]) for i in range(e)]),
                 "mm_contig": lambda: torch.stack([g[i].t().contiguous().mm(x[i]) for i in range(e)])}
        for name, call in calls.items():
            out = call()
            rel = float((out.double() - want).norm() / want.norm())
            fin = bool(torch.isfinite(out).all())
            worst[name] = max(worst.get(name, 0.0), rel if fin else float("inf"))
            print("BMM", name, e, c, f, h, str(dt)[6:], "finite", fin, "rel", f"{rel:.3e}", flush=True)
print("BMM worst", worst, "sms", torch.cuda.get_device_properties(0).multi_processor_count)
