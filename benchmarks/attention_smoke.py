"""One small and one large call of mkernel.attention vs the float64 reference, printing the
relative errors (a first check on a new build; a hang here means a pipeline deadlock)."""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tests")
import mkernel  # noqa: E402
from attention.reference import attention_ref  # noqa: E402

for b, s, s_kv, h, h_kv, d, causal in [(1, 128, 128, 1, 1, 128, False), (1, 200, 300, 4, 2, 64, True),
                                       (2, 2048, 2048, 8, 8, 128, True)]:
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16)
    out, lse = mkernel.attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, causal)
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    fin = torch.isfinite(ref_lse)
    lse_err = (lse.double()[fin] - ref_lse[fin]).abs().max().item()
    print(f"b={b} s={s} s_kv={s_kv} h={h}/{h_kv} d={d} causal={causal}: rel err {rel:.2e}, "
          f"lse max err {lse_err:.2e}", flush=True)
