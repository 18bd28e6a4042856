# Session 22, call D, on nvidia-h200-x2 (the first multi-GPU machine lent): a rank per GPU, no MPS.
# 1. how the two GPUs are linked (topo, peer access);
# 2. the demo (all five ops against float64 references) at W=2 on one node and over 2 emulated nodes;
# 3. benchmarks/multigpu.py at W=2: the fused GEMM ops against NCCL + cuBLAS, PyTorch async-TP and the
#    overlap ideal (GEMM alone, collective alone), every shape; then over 2 emulated nodes (quick);
# 4. the MoE bench at W=2, one node (NVLink peer memory): seed 8k, Mixtral 8k, seed 32k.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
mps_stop
jx topo 40 10 "nvidia-smi topo -m; nvidia-smi nvlink -s | head -20; python3 -c 'import torch; n=torch.cuda.device_count(); print(\"gpus\", n, [torch.cuda.can_device_access_peer(a, b) for a in range(n) for b in range(n) if a != b])'"
jx demo 90 30 "timeout 88 python3 -m mkernel demo --world 2 --nodes 1 --require-all"
jx demo_n2 90 30 "timeout 88 python3 -m mkernel demo --world 2 --nodes 2 --require-all"
jx mgpu 240 60 "timeout 238 python3 benchmarks/multigpu.py --world 2 --iters 10 --timeout 230"
jx moe 90 40 "timeout 88 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 15"
jx mgpu_n2 90 40 "timeout 88 python3 benchmarks/multigpu.py --world 2 --nodes 2 --quick --iters 8 --timeout 85"
