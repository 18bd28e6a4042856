# Session 17's device runs: session 16's call B list (never ran: no machine) after fused19's test, which
# call A skipped (its cold build took 545 s). Carry .bp/ (the build pack from call A plus build/core as
# core.tar.xz: the tree, the wheel, the pack and an unpacked core would pass the 64 MiB carry limit):
#   B: tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s17.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=B TOTAL=585 bash .ci/gpu-dev
case "${CALL:-B}" in
B)
  # fused19 (NOTES "fused19"): 2-stage rs/ar kernel with a 96 KiB reduce buffer at short K — its test first
  jx f19_test2 70 45 'MKERNEL_OP_TIMEOUT=15 timeout 65 python3 -m pytest -x -v -rA -p no:cacheprovider "tests/gpu/test_fused_ops.py::test_stages2_kernels[2]"'
  # gemm15's flip (NOTES "Session 16"): auto at 333 tokens with swap:24 / swap:32 default candidates, no env
  jx g15_auto 60 40 'python3 benchmarks/bench_gemm.py --decode --lean --ms 333,1,16,64 --shapes 8192x8192,3584x8192,8192x3584 --dtypes bf16,fp16 --graph-below-us 100 --rounds 2'
  # attn16 (NOTES "attn16"): narrow top block variants; rules A/B for the non-causal default at 4096 keys
  jx a16 125 90 'bash benchmarks/attn16_device_job.sh'
  # moe12 (NOTES "MoE, moe12"): the pipelined dispatch's W=2 deadlock fix
  jx moe12 70 45 'bash benchmarks/moe12_device_job.sh'
  # moe13 (NOTES "MoE, moe13"): DeepEP-style dispatch-only bandwidth, counted gather, plain vs ce copier
  jx moe13 80 60 'bash benchmarks/moe13_device_job.sh'
  jx f19_w2 60 50 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 2 --set issue --full --only "square M=8192,square M=16384" --ops gemm_rs,gemm_ar --variants stages2,pipe --variant-rows square --lean --no-b --stream --budget 40 --timeout 55'
  ;;
C)
  # attn16's flips (NOTES "Session 17, device runs A and B"): the default route from 4096 keys, then the issue's
  # engine table at the new default (non-causal and causal, vs cuDNN / FA2). Re-pack (attention TUs rebuilt).
  jx a17_tests 120 60 'timeout 115 python3 -m pytest -x -q -rA --tb=short -p no:cacheprovider tests/attention/test_wide_kv.py tests/attention/test_dispatch_route.py tests/attention/test_narrow_top.py tests/attention/test_attention_engine.py'
  jx a17_bench 60 40 'python3 benchmarks/bench_attention.py --seqs 2048,4096,6144,8192,16384 --modes nc,c --skip-alt --skip-cluster --iters 24'
  jx demo 90 70 'python3 -m mkernel demo --world 4 --nodes 2 --require-all'
  ;;
D)
  # The GDR copier's batched submission (session 17 helper; NOTES "Session 17, copier batching"): GPU-direct
  # correctness across emulated nodes first (fused ag W=4 gdr, gemm_rs per tile and coalesced, collectives),
  # then the per-tile gemm_rs row batched (default) and the same with one copy per submission (control).
  jx xn8_tests 130 80 'MKERNEL_OP_TIMEOUT=20 timeout 125 python3 -m pytest -x -q -rA --tb=short -p no:cacheprovider "tests/gpu/test_fused_nodes.py::test_gemm_rs_across_nodes_coalesced[2-2-True-1]" "tests/gpu/test_fused_nodes.py::test_gemm_rs_across_nodes_coalesced[4-2-True-3]" "tests/gpu/test_fused_nodes.py::test_fused_ops_across_nodes[4-2-True]" "tests/gpu/test_collectives.py::test_collectives_across_emulated_nodes[4-2]"'
  jx xn8_rs 45 30 'MKERNEL_OP_TIMEOUT=10 MKERNEL_NET_GDR_COPIER_SUBMIT=ce python3 benchmarks/bench_fused.py --world 2 --nodes 2 --fused-nodes --nodes-lean --ops gemm_rs --only 4096x1024x8192 --budget 15 --timeout 30'
  jx xn8_rs_b1 45 30 'MKERNEL_OP_TIMEOUT=10 MKERNEL_NET_GDR_COPIER_SUBMIT=ce MKERNEL_NET_GDR_COPIER_BATCH=1 python3 benchmarks/bench_fused.py --world 2 --nodes 2 --fused-nodes --nodes-lean --ops gemm_rs --only 4096x1024x8192 --budget 15 --timeout 30'
  ;;
E)
  # moe14 (NOTES "Session 17, moe14"): the kernel layout, dispatch mode 3, early combine — tests, then the bench
  jx moe14 95 60 'bash benchmarks/moe14_device_job.sh'
  ;;
esac
