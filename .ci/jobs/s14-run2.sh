# Session 14's second device run: the helpers' branches merged on main (fused17, moe12, xnode6, attn16, gemm15),
# each job against its rule in benchmarks/NOTES.md (section named per branch). Priority order: what changed a
# default first (fused17's verdict), then the issue targets (M=333, S=4096), then the opt-in paths' fixes.
# Run: JOBS=.ci/jobs/s14-run2.sh REAL_OUT=$OUT OUT=/tmp/devout CALL=A TOTAL=595 bash .ci/gpu-dev
#      (carry build/core and .whl), then within 30 s CALL=B with REUSE_BUILD=1.
case "${CALL:-A}" in
A)
  jx f17_route4 50 30 'MKERNEL_OP_TIMEOUT=15 python3 -m pytest -v -rA --durations=0 -p no:cacheprovider "tests/gpu/test_fused_ops.py::test_ag_gemm_default_route[4]"'
  jx f17_w4 55 35 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 4 --set issue --only "llama70b-fc1 M=16384,llama70b-fc2 M=16384" --variants peertma --variant-rows "llama70b-fc1 M=16384" --lean --samples 7 --stream --budget 40 --timeout 50'
  jx f17_w2 40 25 'MKERNEL_OP_TIMEOUT=20 python3 benchmarks/bench_fused.py --world 2 --set issue --ops ag_gemm --only "square M=16384,llama70b-fc1 M=16384" --variants peertma --variant-rows "square M=16384,llama70b-fc1 M=16384" --lean --samples 7 --stream --budget 30 --timeout 35'
  jx xn6_ag 55 38 'MKERNEL_FUSED_RS_NODES_COALESCE=8 python3 tests/gpu/run_grow.py --steps ag1,ag2,ag2f,rs1 --copier process --prune 0 --grids co --op-timeout 15 --timeout 52'
  ;;
B)
  jx gemm15 125 60 'BUDGET_S=118 bash benchmarks/gemm15_device_job.sh'
  jx a16 125 60 'bash benchmarks/attn16_device_job.sh'
  [ -z "${SKIP_XN6:-}" ] && jx xn6_ag 55 38 'MKERNEL_FUSED_RS_NODES_COALESCE=8 python3 tests/gpu/run_grow.py --steps ag1,ag2,ag2f,rs1 --copier process --prune 0 --grids co --op-timeout 15 --timeout 52'
  jx moe12 70 45 'bash benchmarks/moe12_device_job.sh'
  ;;
esac
