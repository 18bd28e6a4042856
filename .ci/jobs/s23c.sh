# Session 23, call F: the gathered A rows with the K tail zero-filled (cp.async src-size 0 past K: the matrix's
# H = 16 / 32 cases read past their rows in call B) and the gather opt-in (MKERNEL_MOE_GATHER_A=1): the new
# gathered-rows test at W=2/4/8 (matrix + repeat, bit for bit against the expanded output), then the default path.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s23c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=375 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx gathered 100 40 "timeout 98 $P $M -k 'gathered_rows'"
jx one_node 80 40 "timeout 78 $P $M -k 'cuda_ranks_match_reference or graph_replay'"
