# Session 48, call B (same tree as s48a): the collectives tests s48a's 95 s did not reach, with -v so a cut log still
# names each result.
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx collectives_rest 150 30 "timeout 145 $P -v tests/gpu/test_collectives.py -k '4-2 or mismatched or killed'"
