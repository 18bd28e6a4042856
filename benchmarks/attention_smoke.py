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

# The backward paths: torch's FA2 backward fed with our (out, lse) vs the fp32 math backward.
from mkernel.ops import _attention_backward_flash, _attention_backward_math  # noqa: E402

for b, s, s_kv, h, h_kv, d, causal in [(1, 300, 300, 4, 4, 128, False), (1, 200, 333, 8, 2, 64, True)]:
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16)
    dout = torch.randn_like(q)
    out, lse = mkernel.attention(q, k, v, causal=causal)
    ref = _attention_backward_math(dout, q, k, v, out, lse, causal, d ** -0.5)
    try:
        got = _attention_backward_flash(dout, q, k, v, out, lse, causal, d ** -0.5)
        errs = [((g.float() - r.float()).norm() / r.float().norm()).item() for g, r in zip(got, ref)]
        print(f"FA2 backward with our lse, causal={causal} GQA {h}/{h_kv}: rel err dq/dk/dv vs fp32 math "
              + " ".join(f"{e:.2e}" for e in errs), flush=True)
    except Exception as e:  # noqa: BLE001 - report what the device says
        print(f"FA2 backward raised: {type(e).__name__}: {str(e)[:300]}", flush=True)
