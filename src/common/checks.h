// Input checks shared by every op binding: each TORCH_CHECK names the argument and what it got.
#pragma once

#include <ATen/ATen.h>

#include <initializer_list>
#include <sstream>
#include <string>

namespace lltm_ext {

inline std::string describe(const at::Tensor& t) {
  std::ostringstream os;
  os << t.scalar_type() << " tensor of shape " << t.sizes() << " on " << t.device();
  return os.str();
}

inline void check_defined(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.defined(), "lltm_ext: `", name, "` must be a tensor, but got an undefined one.");
}

inline void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK(
      at::isFloatingType(t.scalar_type()), "lltm_ext: `", name,
      "` must have a floating-point dtype (float32, float64, float16 or bfloat16), but got a ",
      describe(t), ".");
}

inline void check_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_contiguous(), "lltm_ext: `", name,
              "` must be contiguous, but got a non-contiguous ", describe(t), " with strides ",
              t.strides(), " (call .contiguous() first; the Python API does this for you).");
}

inline void check_device_type(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "lltm_ext: `", name,
              "` must be on the CPU or a CUDA device, but got a ", describe(t), ".");
}

inline void check_dim(const at::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.dim() == dim, "lltm_ext: `", name, "` must be ", dim, "-D, but got a ", describe(t),
              ".");
}

// Expected sizes; -1 means any.
inline void check_shape(const at::Tensor& t, const char* name,
                        std::initializer_list<int64_t> shape) {
  bool ok = t.dim() == static_cast<int64_t>(shape.size());
  int64_t i = 0;
  for (int64_t s : shape) {
    ok = ok && (s < 0 || t.size(i) == s);
    ++i;
  }
  if (!ok) {
    std::ostringstream want;
    want << "[";
    i = 0;
    for (int64_t s : shape) {
      want << (i++ ? ", " : "") << (s < 0 ? std::string("*") : std::to_string(s));
    }
    want << "]";
    TORCH_CHECK(false, "lltm_ext: `", name, "` must have shape ", want.str(), ", but got a ",
                describe(t), ".");
  }
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& ref,
                              const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), "lltm_ext: all tensors must be on one device, but `",
              name, "` is on ", t.device(), " and `", ref_name, "` is on ", ref.device(), ".");
}

inline void check_same_dtype(const at::Tensor& t, const char* name, const at::Tensor& ref,
                             const char* ref_name) {
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(),
              "lltm_ext: all tensors must have one dtype, but `", name, "` is ", t.scalar_type(),
              " and `", ref_name, "` is ", ref.scalar_type(), ".");
}

// `t` has the same sizes as `ref` (an incoming gradient and the tensor it belongs to).
inline void check_same_sizes(const at::Tensor& t, const char* name, const at::Tensor& ref,
                             const char* ref_name) {
  TORCH_CHECK(t.sizes() == ref.sizes(), "lltm_ext: `", name, "` must have the shape of `", ref_name,
              "` ", ref.sizes(), ", but got a ", describe(t), ".");
}

// An element-wise kernel's operand: its elements fill one block of memory, each once (contiguous,
// or a permutation of contiguous dimensions such as x.t()), so a kernel that runs over numel()
// elements from its data pointer meets each element once.
inline void check_dense(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_non_overlapping_and_dense(), "lltm_ext: `", name,
              "` must be dense (contiguous, or a permutation of contiguous dimensions such as "
              "x.t()), but got a ",
              describe(t), " with strides ", t.strides(),
              " (call .contiguous() first; the Python API does this for you).");
}

// Operands of one element-wise kernel laid out alike (their elements in the same order in memory).
inline void check_same_strides(const at::Tensor& t, const char* name, const at::Tensor& ref,
                               const char* ref_name) {
  TORCH_CHECK(t.strides() == ref.strides(), "lltm_ext: `", name, "` must have the strides of `",
              ref_name, "` ", ref.strides(), ", but got strides ", t.strides(), ".");
}

// A tensor argument of a kernel: defined, floating, on CPU or CUDA.
inline void check_operand(const at::Tensor& t, const char* name) {
  check_defined(t, name);
  check_device_type(t, name);
  check_floating(t, name);
}

// A tensor argument every kernel can read: defined, floating, contiguous, on CPU or CUDA.
inline void check_input(const at::Tensor& t, const char* name) {
  check_operand(t, name);
  check_contiguous(t, name);
}

// The row stride of a 2-D tensor (its row length when it has at most one row).
inline int64_t row_stride(const at::Tensor& t) {
  return t.size(0) <= 1 ? t.size(1) : t.stride(0);
}

// Whether a 2-D tensor's rows are each contiguous (unit column stride) and apart (row stride >=
// row length), such as a column block of a larger matrix: what a kernel reading rows with a
// stride needs.
inline bool has_contiguous_rows(const at::Tensor& t) {
  return t.dim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1) && row_stride(t) >= t.size(1);
}

// A 2-D tensor argument whose rows a kernel reads with a row stride: defined, floating, on CPU or
// CUDA, with contiguous rows. Returns the row stride.
inline int64_t check_rows_input(const at::Tensor& t, const char* name) {
  check_defined(t, name);
  check_device_type(t, name);
  check_floating(t, name);
  check_dim(t, name, 2);
  TORCH_CHECK(has_contiguous_rows(t), "lltm_ext: `", name,
              "` must have contiguous rows (unit column stride, row stride >= row length), but "
              "got a ",
              describe(t), " with strides ", t.strides(), " (call .contiguous() first).");
  return row_stride(t);
}

// A kernel's optional argument: the data of `t`, or null when `t` is undefined.
template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

// Same device and dtype as the reference argument.
inline void check_like(const at::Tensor& t, const char* name, const at::Tensor& ref,
                       const char* ref_name) {
  check_same_device(t, name, ref, ref_name);
  check_same_dtype(t, name, ref, ref_name);
}

}  // namespace lltm_ext

#define CHECK_INPUT(x) ::lltm_ext::check_input(x, #x)
#define CHECK_ROWS_INPUT(x) ::lltm_ext::check_rows_input(x, #x)
#define CHECK_DIM(x, d) ::lltm_ext::check_dim(x, #x, d)
#define CHECK_SHAPE(x, ...) ::lltm_ext::check_shape(x, #x, {__VA_ARGS__})
#define CHECK_LIKE(x, ref) ::lltm_ext::check_like(x, #x, ref, #ref)
#define CHECK_SAME_SIZES(x, ref) ::lltm_ext::check_same_sizes(x, #x, ref, #ref)
