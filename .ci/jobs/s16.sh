# Session 16's device runs. Session 15's call C never ran (its machine went cold; the logs of its calls A/B
# were lost with its workspace — figures in NOTES "Session 15"), so those jobs come first, each against its
# rule in benchmarks/NOTES.md (section named per branch).
# Call A builds from cold and writes the build pack (BP_PACK=1; .ci/gpu-dev): carry the returned
# bp.partNN in .bp/ on every later call and a cold machine restores the objects instead of rebuilding.
#   A: MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s16.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=A TOTAL=590 BP_PACK=1 bash .ci/gpu-dev
#   B: the same with CALL=B (carry build/core, .whl, .bp)
case "${CALL:-A}" in
A)
  # fused19 (NOTES "fused19"): 2-stage rs/ar kernel with a 96 KiB reduce buffer at short K — its test first
  jx f19_test2 70 45 'MKERNEL_OP_TIMEOUT=15 timeout 65 python3 -m pytest -x -v -rA -p no:cacheprovider "tests/gpu/test_fused_ops.py::test_stages2_kernels[2]"'
  jx xn7_bench_ce 34 22 'MKERNEL_OP_TIMEOUT=10 MKERNEL_NET_GDR_COPIER_SUBMIT=ce python3 benchmarks/bench_fused.py --world 2 --nodes 2 --fused-nodes --nodes-lean --ops gemm_rs --only 4096x1024x8192 --budget 15 --timeout 30'
  ;;
B)
  # gemm15's flip (NOTES "Session 16"): auto at 333 tokens with swap:24 / swap:32 default candidates, no env
  jx g15_auto 60 40 'python3 benchmarks/bench_gemm.py --decode --lean --ms 333,1,16,64 --shapes 8192x8192,3584x8192,8192x3584 --dtypes bf16,fp16 --graph-below-us 100 --rounds 2'
  jx f19_w2 60 50 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 2 --set issue --full --only "square M=8192,square M=16384" --ops gemm_rs,gemm_ar --variants stages2,pipe --variant-rows square --lean --no-b --stream --budget 40 --timeout 55'
  # moe12 (NOTES "MoE, moe12"): the pipelined dispatch's W=2 deadlock fix
  jx moe12 70 45 'bash benchmarks/moe12_device_job.sh'
  # moe13 (NOTES "MoE, moe13"): DeepEP-style dispatch-only bandwidth, counted gather, plain vs ce copier
  jx moe13 80 60 'bash benchmarks/moe13_device_job.sh'
  # attn16 (NOTES "attn16"): narrow top block variants; rules A/B for the non-causal default at 4096 keys
  jx a16 125 90 'bash benchmarks/attn16_device_job.sh'
  jx xn6_rs_thread 50 35 'python3 tests/gpu/run_grow.py --steps rs1 --copier thread --prune 1 --grids co --op-timeout 15 --timeout 47'
  ;;
esac
