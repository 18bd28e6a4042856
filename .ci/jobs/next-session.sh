# Session 14's first device run (written at the end of session 13): what session 13 left unverified,
# then the prepared branches' jobs, each with its rule in benchmarks/NOTES.md (section named per job).
# Run: JOBS=.ci/jobs/next-session.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=A TOTAL=570 bash .ci/gpu-dev
#      (carry build/core and .whl), then within 30 s CALL=B with REUSE_BUILD=1.
case "${CALL:-A}" in
A)
  # s13: collectives across nodes with capture_growth's 64 MiB call (it failed only by test order in s13run2)
  jx coll_nodes 110 60 'python3 -m pytest -q -p no:cacheprovider "tests/gpu/test_collectives.py::test_collectives_across_emulated_nodes[2-2]" "tests/gpu/test_collectives.py::test_collectives_across_emulated_nodes[4-2]"'
  # s13: the non-causal default from 8192 keys (166024) through the dispatcher; the variant tests
  jx attn_default 90 40 'python3 -m pytest -q -p no:cacheprovider tests/attention/test_wide_kv.py tests/attention/test_attention_engine.py -k "default or wide"'
  # moe11 (NOTES "MoE, moe11"): the pipelined dispatch's W=2 failure, every rank's output
  jx moe11 118 112 'MKERNEL_MOE_DISPATCH_PIPELINE=1 timeout 45 python3 -m pytest -v --tb=short -p no:cacheprovider "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes[2]" "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes[4]"; timeout 32 python3 -m pytest -v --tb=short -p no:cacheprovider "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_overlapped_dispatch[2]"; timeout 35 python3 -m pytest -v --tb=short -p no:cacheprovider tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_previous_dispatch'
  ;;
B)
  # xnode5 (NOTES "Fused ops across nodes, xnode5"): staged vs in-process copier vs small grid; the opt-in prune guard
  jx xn5_A 40 30 'MKERNEL_OP_TIMEOUT=15 MKERNEL_FUSED_PRUNE=1 MKERNEL_NET_GDR=0 python3 benchmarks/bench_fused.py --world 2 --nodes 2 --fused-nodes --nodes-lean --ops gemm_rs --budget 26 --timeout 32'
  jx xn5_B 50 35 'MKERNEL_OP_TIMEOUT=15 MKERNEL_FUSED_PRUNE=1 MKERNEL_NET_GDR=1 MKERNEL_NET_GDR_COPIER=thread python3 benchmarks/bench_fused.py --world 2 --nodes 2 --fused-nodes --nodes-lean --ops gemm_rs --budget 26 --timeout 40'
  jx xn5_C 40 30 'MKERNEL_OP_TIMEOUT=15 MKERNEL_FUSED_PRUNE=1 MKERNEL_FUSED_SMS=16 python3 benchmarks/bench_fused.py --world 2 --nodes 2 --fused-nodes --nodes-lean --ops gemm_rs --budget 26 --timeout 32'
  # xnode3's lean rows with ag_gemm first (s13run2 left out --ops), under the GPU-direct default
  jx xn3_w2 45 35 'MKERNEL_OP_TIMEOUT=15 MKERNEL_FUSED_PRUNE=1 python3 benchmarks/bench_fused.py --world 2 --nodes 2 --fused-nodes --nodes-lean --ops ag_gemm,gemm_rs,gemm_ar --gpu-gate ag_gemm --budget 34 --timeout 40'
  # gemm14 (NOTES "Small M, gemm14"): cuBLAS's structure at M=333 (variants 22 / 23, opt-in)
  jx gemm14 160 100 'bash benchmarks/gemm14_device_job.sh'
  ;;
esac
