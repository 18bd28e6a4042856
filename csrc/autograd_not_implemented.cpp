// Autograd kernels of the GEMM engine ops, which have no backward: torch's NotImplemented
// fallback at the Autograd key.
//
// Why register anything: an op with no kernel at an Autograd key falls through to autograd's
// global fallback, whose outputs of inputs that require grad carry a grad_fn that only warns on
// backward: a training step through mkernel.gemm would get no gradient and no error
// (torch.library.opcheck's test_autograd_registration flags exactly this). With this kernel the
// outputs still require grad, and backward raises "derivative for mkernel::gemm is not
// implemented". The fused ops (ag_gemm, gemm_rs, gemm_ar, moe_*, ring_attention) get real
// backward formulas with their kernels (issues 12, 13, 14) and are not listed here.
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

TORCH_LIBRARY_IMPL(mkernel, Autograd, m) {
  m.impl("gemm", torch::autograd::autogradNotImplementedFallback());
  m.impl("gemm_grouped", torch::autograd::autogradNotImplementedFallback());
  m.impl("gemm_grouped_packed", torch::autograd::autogradNotImplementedFallback());
  m.impl("gemm_hooked", torch::autograd::autogradNotImplementedFallback());
  m.impl("gemv", torch::autograd::autogradNotImplementedFallback());  // the decode kernel

  m.impl("gemm_swap", torch::autograd::autogradNotImplementedFallback());
}
