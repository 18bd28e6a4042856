"""The extension as a whole: its schemas, its kernels per dispatch key, mkernel._C as a module."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import types

import pytest
import torch

SCHEMAS = {
    "ag_gemm": "mkernel::ag_gemm(Tensor x, Tensor w, int group, int world_size, "
    "bool return_gathered=False) -> (Tensor, Tensor)",
    "gemm_rs": "mkernel::gemm_rs(Tensor x, Tensor w, int group, int world_size) -> Tensor",
    "gemm_ar": "mkernel::gemm_ar(Tensor x, Tensor w, int group, int world_size) -> Tensor",
    "moe_dispatch_gemm": "mkernel::moe_dispatch_gemm(Tensor x, Tensor topk_idx, Tensor w1, "
    "int group, int world_size, int num_experts, int capacity=0, bool return_recv=False, "
    "Tensor? topk_weights=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
    "moe_combine": "mkernel::moe_combine(Tensor y, Tensor route, Tensor recv_counts, "
    "Tensor topk_weights, int group, int world_size, SymInt num_tokens, "
    "Tensor? peer_routes=None) -> Tensor",
    "ring_attention": "mkernel::ring_attention(Tensor q, Tensor k, Tensor v, int group, "
    "int world_size, bool causal=False, float? softmax_scale=None) "
    "-> (Tensor, Tensor)",
    "_bind_core": "mkernel::_bind_core(int api_table_address) -> int",
    "core_version": "mkernel::core_version() -> str",
}
TENSOR_OPS = ["ag_gemm", "gemm_rs", "gemm_ar", "moe_dispatch_gemm", "moe_combine", "ring_attention"]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema(name):
    assert str(getattr(torch.ops.mkernel, name).default._schema) == SCHEMAS[name]


@pytest.mark.parametrize("name", TENSOR_OPS)
@pytest.mark.parametrize("key", ["Meta", "CPU"])
def test_kernel_registered(name, key):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"mkernel::{name}", key)


# Ops whose backward is registered (python/mkernel/autograd.py).
DIFFERENTIABLE = ("ag_gemm", "gemm_rs", "gemm_ar", "moe_dispatch_gemm", "moe_combine", "ring_attention")


@pytest.mark.parametrize("name", TENSOR_OPS)
def test_autograd_registered_only_where_it_landed(name):
    """Autograd lands with the kernels; until then nothing claims to differentiate the ops."""
    import mkernel.autograd  # noqa: F401  (registers the backward formulas)

    has = torch._C._dispatch_has_kernel_for_dispatch_key(f"mkernel::{name}", "Autograd")
    assert has == (name in DIFFERENTIABLE)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", TENSOR_OPS)
def test_cuda_kernel_registered(name):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"mkernel::{name}", "CUDA")


def test_c_extension_imports_as_module(ext):
    """mkernel._C is an (empty, stable-ABI) Python module: PyInit__C returns a module."""
    if ext.from_package:
        module = importlib.import_module("mkernel._C")
    else:  # the JIT build of the same sources: load its PyInit__C under the package's name
        loader = importlib.machinery.ExtensionFileLoader("mkernel._C", ext.library)
        spec = importlib.util.spec_from_loader("mkernel._C", loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    assert isinstance(module, types.ModuleType)
    assert "torch.ops.mkernel" in module.__doc__
    assert not [n for n in dir(module) if not n.startswith("__")], "the module defines no API"
