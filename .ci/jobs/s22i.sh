# Session 22, call I (one H200): the killed-rank tests on the final code (the routing head grew to int64 words;
# the combine may skip its all_gather): a rank SIGKILLed mid-dispatch / mid-combine, one node and 2 emulated nodes.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22i.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx killed 120 40 "timeout 118 $P $M -k killed_rank"
