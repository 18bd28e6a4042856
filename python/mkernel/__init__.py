"""mkernel: fused multi-GPU, multi-node kernels for PyTorch on NVIDIA Hopper.

Typical use under ``torchrun``::

    import torch.distributed as dist, mkernel
    dist.init_process_group("nccl")
    ctx = mkernel.init()            # joins all ranks into a control-plane session
    y = mkernel.ag_gemm(x, w)       # allgather(x) @ w.T, fused
    mkernel.shutdown()              # also runs at exit

``python -m mkernel doctor`` checks a machine's setup.
"""

from __future__ import annotations

__version__ = "0.1.0"

from . import _module_loading  # noqa: E402  (before anything initializes CUDA)

_module_loading.eager_loading_for_gdr()
_module_loading.interpreter_for_gdr()

from . import _native  # noqa: E402  (loads _C before anything registers against it)
from ._logging import get_logger, install as _install_logging, set_log_level  # noqa: E402

_install_logging(_native.core)

from .ops import (  # noqa: E402
    ag_gemm, attention, gemm, gemm_ar, gemm_grouped, gemm_plan, gemm_rs, moe_combine, moe_dispatch_gemm, ring_attention,
)
from . import _moe_registry  # noqa: E402,F401  (MoE fake kernel and autograd)
from .ops import all_gather, all_reduce, last_wait_failure, reduce_scatter, synchronize  # noqa: E402
from .ops import fused_verdicts_file, gemm_plans_file, share_gemm_plans  # noqa: E402
from .runtime import Context, MkernelError, current_group, init, shutdown  # noqa: E402
from .topology import topology  # noqa: E402
from . import autograd as _autograd  # noqa: E402,F401  (backward formulas of the fused ops)
from . import nn  # noqa: E402  (drop-in tensor-parallel layers)

__all__ = [
    "Context", "MkernelError", "ag_gemm", "attention", "current_group", "gemm", "gemm_ar", "gemm_grouped", "gemm_plan",
    "gemm_rs", "get_logger", "init", "moe_combine", "moe_dispatch_gemm", "ring_attention", "set_log_level", "shutdown",
    "topology", "__version__",
    "all_gather", "all_reduce", "last_wait_failure", "reduce_scatter", "synchronize",
]
__all__ += ["fused_verdicts_file", "gemm_plans_file", "share_gemm_plans"]
