"""Session 44, call D: the MoE weight-gradient probe (moe_rank_checks.wgrad_probe) at W = 3 under the MPS daemon that
.ci/gpu-dev started; prints every rank's PROBE lines."""
import os
import sys

sys.path.insert(0, os.getcwd())
from tests.gpu.conftest import rank_env  # noqa: E402
from tests.gpu.test_moe_ranks import RANK_MAIN  # noqa: E402
from tests.launch import run_ranks  # noqa: E402

mps = {k: os.environ[k] for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}
res = run_ranks(RANK_MAIN, 3, timeout=150, env=rank_env(mps, 3, TEST_SUITE="wgrad_probe", TEST_DEVICE="cuda",
                                                         FUZZ_SEED="4401", FUZZ_CASES="10", MKERNEL_OP_TIMEOUT="15"))
for r in res:
    print("rank", r.rank, "rc", r.returncode)
    for line in r.stdout.splitlines():
        if line.startswith("PROBE"):
            print(line[:2500])
    if r.returncode:
        print(r.stderr[-3000:])
