#!/usr/bin/env bash
# moe12's device job (benchmarks/NOTES.md "MoE, moe12"; budget 70 s): the pipelined dispatch
# across 2 emulated nodes at W=2, each case in its own pytest invocation with -x and a pytest
# --timeout below the outer one (the failure report prints before anything is killed; the ranks'
# op timeout is 15 s, so a hang traps and check_ranks prints every rank's tail first); then, if
# every case passed and time is left, one row of the three dispatch modes side by side.
# Run from the repo root: bash benchmarks/moe12_device_job.sh   (last line: SUMMARY ...)
set -u
cd "$(dirname "$0")/.."
T="tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_pipelined"
case_run() {  # $1 name, $2 test id, [$3 outer limit in s, default 32]
  local t0=$SECONDS lim=${3:-32}
  timeout "$lim" python3 -m pytest -x -q -rA --tb=long --timeout $((lim - 4)) -p no:cacheprovider "$T[$2]"
  local rc=$?
  echo "STEP $1 [$2] rc=$rc ($((SECONDS - t0)) s)"
  return $rc
}
r1=- r2=- r3=- rb=skipped
case_run pipelined w2n2; r1=$?            # s13run2 / s14run1's failing case (mode 1, matrix case 2)
case_run headed_sync w2n2-sync; r2=$?     # a device sync between the halves on every rank: the mechanism
if [ "$r1" -eq 0 ]; then
  case_run overlapped w2n2-overlap; r3=$?  # s14run1's hung case (mode 2)
fi
left=$((68 - SECONDS))
if [ "$r1" = 0 ] && [ "$r2" = 0 ] && [ "$left" -ge 25 ]; then
  modes=0,1
  [ "$r3" = 0 ] && modes=0,1,2
  timeout "$left" python3 benchmarks/bench_moe_dispatch_modes.py --world 2 --tokens 8192 \
    --modes "$modes" --iters 8 --emulate 50GB/s,3us --timeout $((left - 6))
  rb=$?
fi
r4=skipped
left=$((68 - SECONDS))
if [ "$r1" = 0 ] && [ "$left" -ge 18 ]; then  # moe11's rule also wants W=4 over 2 nodes
  [ "$left" -gt 32 ] && left=32
  case_run w4_two_nodes w4n2 "$left"; r4=$?
fi
echo "SUMMARY moe12: pipelined(w2n2)=$r1 headed_sync(w2n2-sync)=$r2 overlapped(w2n2-overlap)=$r3 bench=$rb w4n2=$r4 (rc; 0 = pass) in ${SECONDS} s"
