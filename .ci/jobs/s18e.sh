# Session 18 call E: the main job on the GPU with today's defaults (MoE mode 3, fused19 gone, the 4 MiB
# flag region), then the fused ops' core tests on the tree without fused19.
jx demo 100 70 'python3 -m mkernel demo --world 4 --nodes 2 --require-all'
jx fused_core 200 90 'timeout 198 python3 -m pytest -x -q -rA -p no:cacheprovider tests/gpu/test_fused_ops.py -k "test_reduce_ops or test_ag_gemm[2] or test_graph_replay or test_mlp_layers"'
