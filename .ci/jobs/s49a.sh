# Session 49, call A (branch s49-choice-cache): the backward's choice cached whole (one key of the tensors' own
# size / stride tuples and the settings read raw). Its tests (the choice cache, the auto / native routing, the
# backward through every kernel), the body's host pieces again (session 48: choice 48 µs median; predicted ~26),
# then the CUDA-graph replays of the MoE exchange and the fused ops (session 48's grid helper had none in its
# selection).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s49a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=480 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx choice 60 20 "timeout 55 $P -v tests/attention/test_attention_engine.py -k 'choice or gradients or cuda_graph'"
jx routing 60 20 "timeout 55 $P -v tests/attention/test_attention_backward_native.py -k 'autograd_through or backward_mode or native_mode or default_mode or auto_'"
jx bwd_host 60 25 "timeout 55 python3 benchmarks/attention_bwd_host.py --pieces --iters 30"
jx graphs 150 40 "timeout 145 $P -v tests/gpu/test_moe_ranks.py tests/gpu/test_fused_ops.py -k 'graph_replay'"
