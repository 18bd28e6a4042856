# Session 55, chained (REUSE_BUILD=1): the fused ops' GPU suite as far as 230 s reach (every fused test now
# passes through choose_path's stored-verdict exchange, with the cache off as tests/conftest.py sets it).
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
jx fused_suite 235 30 "timeout 232 $P -m 'not big' tests/gpu/test_fused_ops.py"
