# Prepared in session 54 (not run: refused starts left 303 s). Run with BP_PACK=1: a fresh build pack of this
# commit's sources, so later cold calls skip the ~6-8 ninja steps changed since s52d's pack (182-242 s a call).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=60 BP_PACK=1 JOBS=.ci/jobs/s54c.sh \
#     REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 TAIL_LINES=40 bash .ci/gpu-dev      (carry .bp, .whl)
# Then copy $OUT's bp.part* over .bp/ (the pack) and the JSONs to benchmarks/results.
# Predictions: (1) test_verdict_bucket_reuse[2/4] passes: per op the first M measured, two more M of its bucket
# reuse its verdict (no "measured" line, the reuse line names the first key), M under MKERNEL_FUSED_BUCKET=0
# measured; outputs right per tile. Risk: candidate lists that differ by M within the bucket (the test then says
# "measured despite its bucket's verdict"). (2) power_windows' lead-in window: fused_power W=4 ag_gemm / gemm_ar,
# the op within 1% of the better of forced fused / unfused (s54b: 1.7-2.4%, all of it the op's round-0 window).
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
L="python3 -m mkernel launch --mps --timeout 75"
jx bucket 150 40 "timeout 148 $P tests/gpu/test_fused_ops.py -k 'verdict_bucket_reuse or default_route'"
jx fp_w4 80 40 "timeout 78 env MKERNEL_FUSED_VERBOSE=1 $L --world 4 benchmarks/fused_power.py --ops ag_gemm,gemm_ar --window 1.0 --rounds 2"
