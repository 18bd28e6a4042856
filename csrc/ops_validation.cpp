// Building blocks of the per-op validators (see ops_validation.h).
#include "ops_validation.h"

#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <sstream>

namespace mkernel::validation {
namespace {

// "bf16 or fp16", "int64, int32 or bool": the allowed dtypes of a message.
std::string dtype_list(std::initializer_list<at::ScalarType> dtypes) {
  std::ostringstream os;
  size_t i = 0;
  for (at::ScalarType dtype : dtypes) {
    if (i > 0) os << (i + 1 == dtypes.size() ? " or " : ", ");
    os << dtype_name(dtype);
    ++i;
  }
  return os.str();
}

bool dtype_in(at::ScalarType dtype, std::initializer_list<at::ScalarType> allowed) {
  for (at::ScalarType a : allowed) {
    if (a == dtype) return true;
  }
  return false;
}

}  // namespace

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
      return "bf16";
    case at::kHalf:
      return "fp16";
    case at::kFloat:
      return "fp32";
    case at::kDouble:
      return "fp64";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(dtype);
  }
}

bool targets_cuda(const at::Tensor& t) {
  return t.is_cuda() || t.key_set().has_backend(c10::BackendComponent::CUDABit);
}

void check_group(const char* op, int64_t group, int64_t world_size) {
  TORCH_CHECK_VALUE(world_size >= 1, op, ": world_size must be >= 1, got ", world_size);
  TORCH_CHECK_VALUE(group >= 0, op,
                    ": group must be an mkernel group handle >= 0 (from mkernel.init()), got ",
                    group);
}

void check_dim(const char* op, const char* arg, const at::Tensor& t, int64_t dim,
               const char* layout) {
  TORCH_CHECK(t.dim() == dim, op, ": ", arg, " must be a ", dim, "-D tensor ", layout, ", got ",
              t.dim(), "-D ", t.sym_sizes());
}

void check_float_dtype(const char* op, const char* arg, const at::Tensor& t) {
  if (targets_cuda(t)) {
    TORCH_CHECK(dtype_in(t.scalar_type(), {at::kBFloat16, at::kHalf}), op, ": ", arg,
                " must be bf16 or fp16 on CUDA, got ", dtype_name(t.scalar_type()));
  } else {
    TORCH_CHECK(dtype_in(t.scalar_type(), {at::kBFloat16, at::kHalf, at::kFloat}), op, ": ", arg,
                " must be bf16 or fp16 (or fp32 on the CPU reference path), got ",
                dtype_name(t.scalar_type()));
  }
}

void check_dtype_in(const char* op, const char* arg, const at::Tensor& t,
                    std::initializer_list<at::ScalarType> allowed, const char* what) {
  TORCH_CHECK(dtype_in(t.scalar_type(), allowed), op, ": ", arg, " must be ", dtype_list(allowed),
              " (", what, "), got ", dtype_name(t.scalar_type()));
}

void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), op, ": ", arg, " must have the dtype of ",
              ref_arg, " (", ref_arg, ": ", dtype_name(ref.scalar_type()), ", ", arg, ": ",
              dtype_name(t.scalar_type()), ")");
}

void check_same_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                       const at::Tensor& ref) {
  TORCH_CHECK(t.device() == ref.device(), op, ": ", arg, " must be on the device of ", ref_arg,
              " (", ref_arg, ": ", ref.device(), ", ", arg, ": ", t.device(), ")");
}

void check_aligned16(const char* op, const char* arg, const at::Tensor& t) {
  if (t.numel() == 0) return;  // nothing is read
  const auto offset = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16;
  TORCH_CHECK_VALUE(offset == 0, op, ": ", arg,
                    " must start at a 16-byte aligned address (the CUDA kernels read it by TMA and "
                    "16-byte loads), got one ",
                    offset, " bytes past it (a view at an odd element offset? .clone() realigns)");
}

void check_contiguous(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(), op, ": ", arg,
              " must be row-major contiguous (no copy is made; call .contiguous() first), got "
              "sizes ",
              t.sym_sizes(), " with strides ", t.sym_strides());
}

c10::SymBool same_sizes(const at::Tensor& a, const at::Tensor& b) {
  c10::SymBool same = a.dim() == b.dim();
  for (int64_t i = 0; i < a.dim() && i < b.dim(); ++i) {
    same = same.sym_and(a.sym_size(i).sym_eq(b.sym_size(i)));
  }
  return same;
}

void check_linear_operands(const char* op, const at::Tensor& x, const char* x_layout,
                           const at::Tensor& w, const char* w_layout, const char* k_name) {
  check_linear_operands(op, "x", x, x_layout, "w", w, w_layout, k_name);
}

void check_linear_operands(const char* op, const char* x_name, const at::Tensor& x,
                           const char* x_layout, const char* w_name, const at::Tensor& w,
                           const char* w_layout, const char* k_name) {
  check_dim(op, x_name, x, 2, x_layout);
  check_dim(op, w_name, w, 2, w_layout);
  check_float_dtype(op, x_name, x);
  check_same_dtype(op, w_name, w, x_name, x);
  check_same_device(op, w_name, w, x_name, x);
  TORCH_SYM_CHECK(w.sym_size(1).sym_eq(x.sym_size(1)), op, ": ", w_name, " must have the same ",
                  k_name, " as ", x_name, " (", x_name, ": ", x.sym_sizes(), ", ", w_name, ": ",
                  w.sym_sizes(), ")");
  check_contiguous(op, x_name, x);
  check_contiguous(op, w_name, w);
}

void check_attention_operands(const char* op, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, std::optional<double> softmax_scale) {
  if (softmax_scale.has_value()) {
    TORCH_CHECK_VALUE(std::isfinite(*softmax_scale) && *softmax_scale > 0, op,
                      ": softmax_scale must be a finite number > 0 (or None for 1/sqrt(d)), got ",
                      *softmax_scale);
  }
  check_dim(op, "q", q, 4, "[b, s, h, d]");
  check_dim(op, "k", k, 4, "[b, s_kv, h_kv, d]");
  check_dim(op, "v", v, 4, "[b, s_kv, h_kv, d]");
  check_float_dtype(op, "q", q);
  check_same_dtype(op, "k", k, "q", q);
  check_same_dtype(op, "v", v, "q", q);
  check_same_device(op, "k", k, "q", q);
  check_same_device(op, "v", v, "q", q);
  TORCH_SYM_CHECK(k.sym_size(0).sym_eq(q.sym_size(0)), op,
                  ": k must have the batch size b of q (q: ", q.sym_sizes(), ", k: ", k.sym_sizes(),
                  ")");
  TORCH_SYM_CHECK(k.sym_size(3).sym_eq(q.sym_size(3)), op,
                  ": k must have the head dim d of q (q: ", q.sym_sizes(), ", k: ", k.sym_sizes(),
                  ")");
  TORCH_SYM_CHECK(k.sym_size(2).sym_ge(1), op,
                  ": k must have at least one head (h_kv >= 1), got k: ", k.sym_sizes());
  TORCH_SYM_CHECK((q.sym_size(2) % k.sym_size(2)).sym_eq(0), op,
                  ": q's head count h must be a multiple of k's head count h_kv (grouped-query "
                  "attention) (q: ",
                  q.sym_sizes(), ", k: ", k.sym_sizes(), ")");
  TORCH_SYM_CHECK(same_sizes(v, k), op, ": v must have the shape of k (k: ", k.sym_sizes(),
                  ", v: ", v.sym_sizes(), ")");
  check_contiguous(op, "q", q);
  check_contiguous(op, "k", k);
  check_contiguous(op, "v", v);
}

}  // namespace mkernel::validation
