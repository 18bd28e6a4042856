# Session 15's first device run (written in session 14): what session 14 merged but could not run (its
# second run's call B never started), then the jobs prepared after it. Each job has its rule in
# benchmarks/NOTES.md (section named per branch).
# Run (the device's .git copy can be stale: pass the commit):
#   MKERNEL_COMMIT=<git rev-parse --short HEAD here> JOBS=.ci/jobs/next-session.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=A TOTAL=590 bash .ci/gpu-dev
#   (carry build/core and .whl), then at once (the machine is released ~30 s after a call returns)
#   CALL=B with REUSE_BUILD=1. Budget: a cold start ~90 s + the build ~450 s of the session's 1800 s.
case "${CALL:-A}" in
A)
  # fused17 + the one-loss floor (NOTES "Session 14, device run 2"): W=4 gemm_ar fc2 M=16384 should now run fused
  jx f17_w4 55 35 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 4 --set issue --only "llama70b-fc1 M=16384,llama70b-fc2 M=16384" --variants peertma --variant-rows "llama70b-fc1 M=16384" --lean --samples 7 --stream --budget 40 --timeout 50'
  # gemm15 (NOTES "Small M, gemm15"): 168-wide token tiles, M=333
  jx gemm15 150 100 'BUDGET_S=140 bash benchmarks/gemm15_device_job.sh'
  ;;
B)
  # attn16 (NOTES "attn16"): narrow top block variants; rules A/B for the non-causal default at 4096 keys
  jx a16 125 90 'bash benchmarks/attn16_device_job.sh'
  # moe12 (NOTES "MoE, moe12"): the pipelined dispatch's W=2 deadlock fix
  jx moe12 70 45 'bash benchmarks/moe12_device_job.sh'
  # xnode6's control (the old grid list; expected to stall as in s14run1) and the thread copier
  jx xn6_rs_thread 50 35 'python3 tests/gpu/run_grow.py --steps rs1 --copier thread --prune 1 --grids co --op-timeout 15 --timeout 47'
  ;;
esac
