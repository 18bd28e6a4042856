# Session 50, call D (main, with the last 219 s of the device budget): a current build pack for the next session
# (BP_PACK=1; s50b's pack is 30 steps behind) and, if time is left, the timeline tests after their helpers moved
# into test_cross_tile (no result files).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s50d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=8 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider"
jx timeline_tests 20 10 "timeout 18 $P -x tests/attention/test_timeline.py -k 'case0 or case7 or causal'"
