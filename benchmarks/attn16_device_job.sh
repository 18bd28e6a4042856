#!/usr/bin/env bash
# attn16's device job (issue 13: the engine's non-causal forward at S = 4096; NOTES "attn16"):
#   1. GPU tests of the narrow-top-block variants 690312 / 952456 / 1738888 (fp64 reference, poisoned
#      outputs, ragged KV lengths with narrow and whole top blocks, split-tail pieces, GQA / MQA).
#   2. The non-causal bench twice (interleaved with cuDNN and FA2, GPU time), S = 4096, 6144, 8192
#      (+ 16384 in the first log: the wide default's guard), variants 2184, 166024 and the three new.
#   3. The causal control at S = 4096 (the default 6280 vs cuDNN / FA2: the run's anchor).
# Needs the extension rebuilt (new .cu: attention_variants_narrow.cu). Run from the repo root; ~90 s
# expected, 122 s at most (step timeouts 50 + 35 + 22 + 15; a bench cut by its timeout keeps its printed rows).
set -u
PY=${PY:-python3}
V=2184,166024,690312,952456,1738888
echo "== attn16 1/4: tests/attention/test_narrow_top.py"
timeout 50 $PY -m pytest -q --tb=short -p no:cacheprovider tests/attention/test_narrow_top.py 2>&1
echo "== attn16 rc tests=$?"
echo "== attn16 2/4: non-causal bench, log 1 (S 4096,6144,8192,16384)"
timeout 35 $PY benchmarks/bench_attention.py --seqs 4096,6144,8192,16384 --modes nc --skip-alt --skip-cluster \
  --variants $V --iters 24 2>&1
echo "== attn16 rc bench1=$?"
echo "== attn16 3/4: non-causal bench, log 2 (S 4096,6144,8192)"
timeout 22 $PY benchmarks/bench_attention.py --seqs 4096,6144,8192 --modes nc --skip-alt --skip-cluster \
  --variants $V --iters 24 2>&1
echo "== attn16 rc bench2=$?"
echo "== attn16 4/4: causal control, S 4096 (default 6280)"
timeout 15 $PY benchmarks/bench_attention.py --seqs 4096 --modes c --skip-alt --skip-cluster --iters 24 2>&1
echo "== attn16 rc causal=$?"
exit 0
