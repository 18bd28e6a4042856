# Session 33, call D (no csrc change since s33b): the rest of the ring suite and the engine-hook tests on the branch
# (the kernel glue changed for every hooked kernel).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s33d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=330 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_rest 220 60 "timeout 218 $P tests/gpu/test_ring_attention.py -k 'not (OWN_FIRST or across or bit_for_bit or BLOCK_N or SPLIT_MASK or SEND_FIRST or SEND_CTAS)'"
jx hooks 70 30 "timeout 68 $P tests/attention/test_attention_hooks.py tests/attention/test_ring_compute_alone.py -x"
