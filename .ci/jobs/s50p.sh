# Session 50, call P (branch s50-cross-odirect): the checkout came back without .bp/ (and without session 49's
# branch, rewritten here), so this call builds the dev build (MKERNEL_DEV_BUILD=1) from nothing and writes a new build
# pack (BP_PACK=1) for the next calls; if time is left, the cross-tile tests (no result files: the call's commit
# label is the one it was started with).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s50p.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=585 TAIL_LINES=12 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx cross_tests 150 60 "timeout 145 $P -x tests/attention/test_cross_tile.py"
