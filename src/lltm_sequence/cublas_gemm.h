// cuBLAS products on strided matrix views, for the LLTM's CUDA host code (CUDA builds only): the
// cell's products (gemm_cuda, lltm_cuda_host.cpp) and the sequence's (sequence_cuda_host.cpp,
// which calls them on raw pointers every time step: no tensor is made per call); small products
// that cuBLAS would split too finely go through cuBLASLt unsplit (cublas_lt_cuda_host.cpp).
#pragma once

#include <ATen/ATen.h>
#include <ATen/DynamicLibrary.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "common/cuda_host.h"
#include "common/env_setting.h"

namespace lltm_ext::lltm {

// The cuBLAS functions used here, from the libcublas that torch itself loaded (same major
// version as the headers compiled against): torch does not export its own GEMM wrappers, and
// linking the library would tie the build to where a toolkit keeps it.
struct Cublas {
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasGetMathMode) get_math_mode;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasGetStream) get_stream;
  decltype(&cublasSetWorkspace) set_workspace;

  static const Cublas& get() {
    static const Cublas api = [] {
      static at::DynamicLibrary lib(("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR)).c_str(),
                                    nullptr, /*leak_handle=*/true);
      return Cublas{
          reinterpret_cast<GemmEx>(lib.sym("cublasGemmEx")),
          reinterpret_cast<decltype(&cublasSetMathMode)>(lib.sym("cublasSetMathMode")),
          reinterpret_cast<decltype(&cublasGetMathMode)>(lib.sym("cublasGetMathMode")),
          reinterpret_cast<decltype(&cublasSetStream)>(lib.sym("cublasSetStream_v2")),
          reinterpret_cast<decltype(&cublasGetStream)>(lib.sym("cublasGetStream_v2")),
          reinterpret_cast<decltype(&cublasSetWorkspace)>(lib.sym("cublasSetWorkspace_v2"))};
    }();
    return api;
  }
};

inline void check_cublas(cublasStatus_t status, const char* what) {
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "lltm_ext: cuBLAS ", what, " failed with status ",
              static_cast<int>(status), ".");
}

// A matrix in memory, (rows x cols): column-major (element (r, c) at r + c * ld) or row-major
// (at r * ld + c).
struct Mat {
  const void* data;
  int64_t rows, cols;
  bool col_major;
  int64_t ld;
};

// A contiguous row-major (rows x cols) matrix, or one whose rows are ld elements apart.
inline Mat row_major(const void* data, int64_t rows, int64_t cols, int64_t ld) {
  return {data, rows, cols, false, ld};
}

inline Mat transposed(const Mat& m) {
  return {m.data, m.cols, m.rows, !m.col_major, m.ld};
}

// Rows [r, r + len) or columns [c, c + len) of m, elements of `size` bytes.
inline Mat row_block(const Mat& m, int64_t r, int64_t len, int64_t size) {
  const int64_t step = m.col_major ? 1 : m.ld;
  return {static_cast<const char*>(m.data) + r * step * size, len, m.cols, m.col_major, m.ld};
}
inline Mat col_block(const Mat& m, int64_t c, int64_t len, int64_t size) {
  const int64_t step = m.col_major ? m.ld : 1;
  return {static_cast<const char*>(m.data) + c * step * size, m.rows, len, m.col_major, m.ld};
}

// A 2-D tensor view with unit stride in one dimension as a Mat.
inline Mat mat_of(const at::Tensor& t) {
  const int64_t R = t.size(0), C = t.size(1), sr = t.stride(0), sc = t.stride(1);
  if ((R <= 1 || sr == 1) && (C <= 1 || sc >= std::max<int64_t>(R, 1))) {
    return {t.const_data_ptr(), R, C, true, C <= 1 ? std::max<int64_t>(R, 1) : sc};
  }
  TORCH_CHECK((C <= 1 || sc == 1) && (R <= 1 || sr >= std::max<int64_t>(C, 1)),
              "lltm_ext: internal error: a GEMM operand has strides ", t.strides(),
              " (one dimension must have unit stride)");
  return {t.const_data_ptr(), R, C, false, R <= 1 ? std::max<int64_t>(C, 1) : sr};
}

inline cudaDataType_t data_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return CUDA_R_32F;
    case at::kDouble:
      return CUDA_R_64F;
    case at::kHalf:
      return CUDA_R_16F;
    case at::kBFloat16:
      return CUDA_R_16BF;
    default:
      TORCH_CHECK(false, "lltm_ext: no cuBLAS product for dtype ", t);
  }
}

// One column-major product, c (m x n) = op_x(x) op_y(y) + beta c, as cuBLAS takes it.
struct LtProduct {
  cublasOperation_t op_x, op_y;
  int64_t m, n, k;
  const void* x;
  int64_t ld_x;
  const void* y;
  int64_t ld_y;
  void* c;
  int64_t ld_c;
  cudaDataType_t type;
  cublasComputeType_t compute;
  float beta;
};

// Runs p through cuBLASLt with split-K excluded, on `stream`, where cuBLAS's heuristic would cut
// its K into pieces of only a few elements, and returns true; false, doing nothing, otherwise
// (float64, or cuBLASLt not loadable). cublas_lt_cuda_host.cpp.
bool gemm_unsplit(const LtProduct& p, cudaStream_t stream);

constexpr int64_t kMaxDim = INT_MAX;
// The most elements one operand of one cuBLAS call spans (rows x ld, or columns x ld): past 2^31
// a product of 2.2e9-element d_gates came out wrong, so larger operands go in pieces.
constexpr int64_t kMaxSpan = INT_MAX;

// cuBLAS products on the handle's stream (the current stream of the current device, or a capture's:
// step_graphs.h), for the length of a call: operands a and b in `dtype`, c in `out` (`dtype` where
// undefined; float32 for a half `dtype`: the mixed products of a float32 state); float32 on TF32
// tensor cores when `tf32`, else in full float32 (torch sets the handle's math mode from its
// matmul precision; it is restored when done). Half types accumulate in float.
class Blas {
 public:
  Blas(at::ScalarType dtype, bool tf32, at::ScalarType out = at::ScalarType::Undefined)
      : api_(Cublas::get()),
        handle_(at::cuda::getCurrentCUDABlasHandle()),
        type_(data_type(dtype)),
        c_type_(data_type(out == at::ScalarType::Undefined ? dtype : out)),
        size_(static_cast<int64_t>(c10::elementSize(dtype))),
        c_size_(
            static_cast<int64_t>(c10::elementSize(out == at::ScalarType::Undefined ? dtype : out))),
        is_double_(dtype == at::kDouble),
        compute_(is_double_                      ? CUBLAS_COMPUTE_64F
                 : (dtype == at::kFloat && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F) {
    check_cublas(api_.get_math_mode(handle_, &mode_), "cublasGetMathMode");
    check_cublas(api_.set_math_mode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  ~Blas() { api_.set_math_mode(handle_, mode_); }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  int64_t element_size() const { return size_; }
  cublasHandle_t handle() const { return handle_; }

  // c = a @ b + beta c (beta 0 or 1), any sizes: in pieces where a dimension passes cuBLAS's int,
  // or where one operand of a call would span more than kMaxSpan elements (rows of c, columns of
  // c, or K accumulated); K = 0 leaves beta c.
  void gemm(const Mat& a, const Mat& b, const Mat& c, double beta) const {
    const int64_t M = c.rows, N = c.cols, K = a.cols;
    TORCH_CHECK(beta == 0 || beta == 1, "lltm_ext: internal error: beta must be 0 or 1");
    TORCH_CHECK(type_ == c_type_ || (c_type_ == CUDA_R_32F && !is_double_),
                "lltm_ext: internal error: a mixed product must write float32");
    if (M == 0 || N == 0) {
      return;
    }
    if (K == 0) {
      if (beta == 0) {  // c = 0, a strided block
        const int64_t width = c.col_major ? M : N, height = c.col_major ? N : M;
        C10_CUDA_CHECK(cudaMemset2DAsync(const_cast<void*>(c.data), c.ld * c_size_, 0,
                                         width * c_size_, height, stream()));
      }
      return;
    }
    // A dimension's piece: kMaxDim, and kMaxSpan / ld for each operand laid out along it.
    const auto piece = [](std::initializer_list<std::pair<bool, int64_t>> along) {
      int64_t p = kMaxDim;
      for (const auto& [strided, ld] : along) {
        if (strided) {
          p = std::min(p, std::max<int64_t>(1, kMaxSpan / std::max<int64_t>(ld, 1)));
        }
      }
      return p;
    };
    const int64_t pm = piece({{!a.col_major, a.ld}, {!c.col_major, c.ld}});
    const int64_t pn = piece({{b.col_major, b.ld}, {c.col_major, c.ld}});
    const int64_t pk = piece({{a.col_major, a.ld}, {!b.col_major, b.ld}});
    for (int64_t r = 0; r < M; r += pm) {
      const int64_t rows = std::min(pm, M - r);
      for (int64_t q = 0; q < N; q += pn) {
        const int64_t cols = std::min(pn, N - q);
        const Mat cc = col_block(row_block(c, r, rows, c_size_), q, cols, c_size_);
        for (int64_t p = 0; p < K; p += pk) {
          const int64_t depth = std::min(pk, K - p);
          call(col_block(row_block(a, r, rows, size_), p, depth, size_),
               col_block(row_block(b, p, depth, size_), q, cols, size_), cc, p == 0 ? beta : 1.0);
        }
      }
    }
  }

 private:
  // The handle's stream now: the caller's, or a capture's while run_step_loop captures.
  cudaStream_t stream() const {
    cudaStream_t s = nullptr;
    check_cublas(api_.get_stream(handle_, &s), "cublasGetStream");
    return s;
  }

  // Operand X of a column-major product, as cuBLAS takes it: X = m, or X = m^T when `transpose`.
  static std::pair<cublasOperation_t, int> operand(const Mat& m, bool transpose) {
    return {m.col_major != transpose ? CUBLAS_OP_N : CUBLAS_OP_T, static_cast<int>(m.ld)};
  }

  // One cuBLAS call: every dimension fits in an int.
  void call(const Mat& a, const Mat& b, const Mat& c, double beta) const {
    TORCH_CHECK(a.ld <= kMaxDim && b.ld <= kMaxDim && c.ld <= kMaxDim,
                "lltm_ext: a matrix row is longer than cuBLAS's 32-bit leading dimension");
    // Column-major C' = X Y: C' = c (X = a, Y = b), or C' = c^T (X = b^T, Y = a^T).
    const Mat& x = c.col_major ? a : b;
    const Mat& y = c.col_major ? b : a;
    const auto [op_x, ld_x] = operand(x, !c.col_major);
    const auto [op_y, ld_y] = operand(y, !c.col_major);
    const int m = static_cast<int>(c.col_major ? c.rows : c.cols);
    const int n = static_cast<int>(c.col_major ? c.cols : c.rows);
    const double one = 1.0;
    const float one_f = 1.0f, beta_f = static_cast<float>(beta);
    const void* alpha_p = is_double_ ? static_cast<const void*>(&one) : &one_f;
    const void* beta_p = is_double_ ? static_cast<const void*>(&beta) : &beta_f;
    if (type_ == c_type_ && gemm_unsplit({op_x, op_y, m, n, a.cols, x.data, ld_x, y.data, ld_y,
                                          const_cast<void*>(c.data), c.ld, type_, compute_, beta_f},
                                         stream())) {
      return;
    }
    check_cublas(api_.gemm_ex(handle_, op_x, op_y, m, n, static_cast<int>(a.cols), alpha_p, x.data,
                              type_, ld_x, y.data, type_, ld_y, beta_p, const_cast<void*>(c.data),
                              c_type_, static_cast<int>(c.ld), compute_, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }

  const Cublas& api_;
  cublasHandle_t handle_;
  cudaDataType_t type_, c_type_;
  int64_t size_, c_size_;
  bool is_double_;
  cublasComputeType_t compute_;
  cublasMath_t mode_ = CUBLAS_DEFAULT_MATH;
};

// W_h (3S x S) for cuBLAS's step products: the weights' own columns, or, where their rows' stride
// (S + I) breaks the 16-byte alignment that the step's other operands (h_{t-1}, the gates: rows of
// S and 3S) keep, in calls of at least kAlignedCopySteps steps, a contiguous copy: cuBLAS runs its
// Hopper kernels (TMA loads) on 16-byte aligned operands only, and on the unaligned W_h fell back
// to its sm_80 kernels at about half their speed every step; the copy costs about two steps' reads
// of W_h. Figures: docs/decisions_sequence.md#cublas-aligned-weights.
constexpr int64_t kAlignedCopySteps = 4;
struct CublasWeights {
  at::Tensor copy;  // undefined: w_h is the weights' own
  Mat w_h;
};
inline CublasWeights cublas_w_h(const at::Tensor& weights, int64_t S, int64_t steps, int64_t es) {
  const int64_t ld = weights.size(1);
  const Mat own = col_block(row_major(weights.const_data_ptr(), 3 * S, ld, ld), 0, S, es);
  const bool aligned =
      (ld * es) % 16 == 0 && reinterpret_cast<uintptr_t>(weights.const_data_ptr()) % 16 == 0;
  if (aligned || (S * es) % 16 != 0 || steps < kAlignedCopySteps) {
    return {at::Tensor(), own};
  }
  at::Tensor copy = weights.narrow(1, 0, S).contiguous();
  return {copy, row_major(copy.const_data_ptr(), 3 * S, S, S)};
}

// The half types' cuBLAS step products at a state S that is not a multiple of 8: cuBLAS runs
// its older kernels (sm_80's, with split-K reductions) on such shapes, whatever the rows'
// alignment, at about half the speed of those it runs at S rounded up. In calls of at least
// kAlignedCopySteps steps (unless LLTM_EXT_SEQUENCE_STEP_PAD=off) the products run on padded
// copies instead: W_h in a (3S, S) corner of zeros (np = 3S and sp = S rounded up to 8), the
// step's operand (forward h_{t-1} (B, sp), backward dG_t (B, np), zeros past S or 3S: the gate
// kernels write the rest beside their own outputs, RowCopy), each product a whole (B, np) or
// (B, sp) of float32 sums that the next gate kernel adds (SplitSums with rows of np or sp).
// Figures: docs/decisions_sequence.md#padded-step-products.
struct PaddedStep {
  at::Tensor w;        // (np, sp): W_h, zeros past 3S rows and S columns; undefined: no padding
  at::Tensor operand;  // forward (B, sp), backward (B, np); zeros past S or 3S
  at::Tensor sums;     // float32, forward (B, np), backward (B, sp)
  int64_t sp = 0, np = 0;
  bool used() const { return w.defined(); }
};
inline PaddedStep padded_step(const at::Tensor& weights, int64_t B, int64_t S, int64_t steps,
                              bool backward) {
  const at::ScalarType t = weights.scalar_type();
  const bool off = env_choice("LLTM_EXT_SEQUENCE_STEP_PAD") == "off";  // read (checked) always
  if (off || (t != at::kHalf && t != at::kBFloat16) || S % 8 == 0 || B == 0 ||
      steps < kAlignedCopySteps) {
    return {};
  }
  PaddedStep p;
  p.sp = (S + 7) / 8 * 8;
  p.np = (3 * S + 7) / 8 * 8;
  p.w = at::zeros({p.np, p.sp}, weights.options());
  p.w.narrow(0, 0, 3 * S).narrow(1, 0, S).copy_(weights.narrow(1, 0, S));
  p.operand = at::zeros({B, backward ? p.np : p.sp}, weights.options());
  p.sums = at::empty({B, backward ? p.sp : p.np}, weights.options().dtype(at::kFloat));
  return p;
}

}  // namespace lltm_ext::lltm
