# Session 15's first device run (written in session 14): what session 14 merged but could not run (its
# second run's call B never started), then the jobs prepared after it. Each job has its rule in
# benchmarks/NOTES.md (section named per branch).
# Run (the device's .git copy can be stale: pass the commit):
#   MKERNEL_COMMIT=<git rev-parse --short HEAD here> JOBS=.ci/jobs/next-session.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=A TOTAL=590 bash .ci/gpu-dev
#   (carry build/core and .whl), then at once (the machine is released ~30 s after a call returns)
#   CALL=B with REUSE_BUILD=1 (TOTAL=590), then CALL=C likewise with what is left (TOTAL = budget_left - 30).
#   Budget: a cold start ~90 s + the build ~480 s of the session's 1800 s; call A's jobs get ~110 s.
case "${CALL:-A}" in
A)
  # How big the build is: can a later cold call carry a prebuilt extension instead of rebuilding (~480 s)?
  jx so_size 40 30 'ls -la python/mkernel/_C*.so; du -sh build 2>/dev/null; for f in python/mkernel/_C*.so; do echo "xz: $(xz -T16 -6 -c $f | wc -c) zstd: $(zstd -q -T16 -19 -c $f 2>/dev/null | wc -c)"; done; find build -name "*.o" | head -3; du -ch $(find build -name "*.o") 2>/dev/null | tail -1'
  # fused17 + the one-loss floor (NOTES "Session 14, device run 2"): W=4 gemm_ar fc2 M=16384 should now run fused
  jx f17_w4 55 35 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 4 --set issue --only "llama70b-fc1 M=16384,llama70b-fc2 M=16384" --variants peertma --variant-rows "llama70b-fc1 M=16384" --lean --samples 7 --stream --budget 40 --timeout 50'
  # xnode7 (NOTES "Fused ops across nodes, xnode7"): the GPU-direct copier on the copy engines vs plain
  jx xn7_rs_ce 32 20 'MKERNEL_FUSED_RS_NODES_COALESCE=8 python3 tests/gpu/run_grow.py --steps rs1 --copier process --submit ce --prune 0 --grids co --op-timeout 10 --timeout 28'
  jx xn7_rs_plain 32 20 'MKERNEL_FUSED_RS_NODES_COALESCE=8 python3 tests/gpu/run_grow.py --steps rs1 --copier process --submit plain --prune 0 --grids co --op-timeout 10 --timeout 28'
  ;;
B)
  # gemm15 (NOTES "Small M, gemm15"): 168-wide token tiles, M=333
  jx gemm15 150 100 'BUDGET_S=140 bash benchmarks/gemm15_device_job.sh'
  # fused18 (NOTES "Fused ops, fused18"): cluster-free c1x1 fused kernels for the square rows (test first)
  jx f18_test2 70 50 'MKERNEL_OP_TIMEOUT=15 timeout 65 python3 -m pytest -x -v -rA -p no:cacheprovider "tests/gpu/test_fused_ops.py::test_c1x1_kernels[2]"'
  jx f18_w2 48 40 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 2 --set issue --full --only "square M=8192,square M=16384" --variants c1x1 --variant-rows square --lean --no-b --stream --budget 32 --timeout 45'
  jx f18_w4 50 42 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 4 --set issue --full --only "square M=8192,square M=16384" --variants c1x1 --variant-rows square --lean --no-b --stream --budget 34 --timeout 47'
  # attn16 (NOTES "attn16"): narrow top block variants; rules A/B for the non-causal default at 4096 keys
  jx a16 125 90 'bash benchmarks/attn16_device_job.sh'
  ;;
C)
  jx xn7_bench_ce 34 22 'MKERNEL_OP_TIMEOUT=10 MKERNEL_NET_GDR_COPIER_SUBMIT=ce python3 benchmarks/bench_fused.py --world 2 --nodes 2 --fused-nodes --nodes-lean --ops gemm_rs --only 4096x1024x8192 --budget 15 --timeout 30'
  # moe12 (NOTES "MoE, moe12"): the pipelined dispatch's W=2 deadlock fix
  jx moe12 70 45 'bash benchmarks/moe12_device_job.sh'
  # xnode6's control (the old grid list; expected to stall as in s14run1) and the thread copier
  # fused19 (NOTES "fused19"): 2-stage rs/ar kernel with a 96 KiB reduce buffer at short K
  jx f19_test2 70 50 'MKERNEL_OP_TIMEOUT=15 timeout 65 python3 -m pytest -x -v -rA -p no:cacheprovider "tests/gpu/test_fused_ops.py::test_stages2_kernels[2]"'
  jx f19_w2 60 50 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 2 --set issue --full --only "square M=8192,square M=16384" --ops gemm_rs,gemm_ar --variants stages2,pipe --variant-rows square --lean --no-b --stream --budget 40 --timeout 55'
  # moe13 (NOTES "MoE, moe13"): DeepEP-style dispatch-only bandwidth, counted gather, plain vs ce copier
  jx moe13 80 60 'bash benchmarks/moe13_device_job.sh'
  jx xn6_rs_thread 50 35 'python3 tests/gpu/run_grow.py --steps rs1 --copier thread --prune 1 --grids co --op-timeout 15 --timeout 47'
  ;;
esac
