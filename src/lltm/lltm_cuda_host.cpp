// Host side of the LLTM's CUDA work (CUDA builds only): the gate kernels' launches (device guard,
// current stream, dtype dispatch, launch check), cuBLAS products on strided views, and the
// sequence's loops over time steps (raw pointers: two launches per step, no tensor made).
#include <ATen/DynamicLibrary.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "common/checks.h"
#include "common/cuda_host.h"
#include "common/dispatch.h"
#include "lltm/lltm.h"

namespace lltm_ext::lltm {

void forward_gates_cuda(const at::Tensor& gates, const at::Tensor& bias, const at::Tensor& old_cell,
                        const at::Tensor& new_h, const at::Tensor& new_cell) {
  const c10::cuda::CUDAGuard guard(old_cell.device());
  LLTM_EXT_DISPATCH_FLOATING(gates.scalar_type(), "lltm_forward_cuda", [&] {
    C10_CUDA_CHECK(launch_forward_gates(
        gates.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(bias),
        old_cell.const_data_ptr<scalar_t>(), new_h.mutable_data_ptr<scalar_t>(),
        new_cell.mutable_data_ptr<scalar_t>(), old_cell.numel(), old_cell.size(1),
        cuda::sm_count(old_cell.get_device()), c10::cuda::getCurrentCUDAStream()));
  });
}

void backward_gates_cuda(const at::Tensor& grad_h, int64_t grad_h_ld,
                         const at::Tensor& grad_h_extra, const at::Tensor& grad_cell,
                         const at::Tensor& new_cell, const at::Tensor& gates,
                         const at::Tensor& bias, const at::Tensor& d_gates,
                         const at::Tensor& d_old_cell, const at::Tensor& d_bias) {
  const c10::cuda::CUDAGuard guard(new_cell.device());
  if (new_cell.numel() == 0) {
    if (d_bias.defined()) {
      d_bias.zero_();  // no rows: a zero gradient
    }
    return;
  }
  const int sms = cuda::sm_count(new_cell.get_device());
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  LLTM_EXT_DISPATCH_FLOATING(new_cell.scalar_type(), "lltm_backward_cuda", [&] {
    using acc_t = cuda::opmath_t<scalar_t>;
    // Scratch for the bias gradient's partial sums (one row per row of blocks), from the caching
    // allocator; a single row of blocks writes d_bias directly.
    const int64_t row_blocks =
        d_bias.defined() ? backward_row_blocks<scalar_t>(batch, state, sms, /*bias_grad=*/true) : 1;
    const at::Tensor bias_sums =
        row_blocks > 1
            ? at::empty({row_blocks, 3 * state},
                        new_cell.options().dtype(at::toOpMathType(new_cell.scalar_type())))
            : at::Tensor();
    C10_CUDA_CHECK(launch_backward_gates(
        grad_h.const_data_ptr<scalar_t>(), grad_h_ld, data_or_null<scalar_t>(grad_h_extra),
        grad_cell.const_data_ptr<scalar_t>(), new_cell.const_data_ptr<scalar_t>(),
        gates.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(bias),
        d_gates.mutable_data_ptr<scalar_t>(), d_old_cell.mutable_data_ptr<scalar_t>(),
        bias_sums.defined() ? bias_sums.mutable_data_ptr<acc_t>() : nullptr,
        d_bias.defined() ? d_bias.mutable_data_ptr<scalar_t>() : nullptr, new_cell.numel(), state,
        sms, c10::cuda::getCurrentCUDAStream()));
  });
}

namespace {

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

  static const Cublas& get() {
    static const Cublas api = [] {
      static at::DynamicLibrary lib(("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR)).c_str(),
                                    nullptr, /*leak_handle=*/true);
      return Cublas{reinterpret_cast<GemmEx>(lib.sym("cublasGemmEx")),
                    reinterpret_cast<decltype(&cublasSetMathMode)>(lib.sym("cublasSetMathMode")),
                    reinterpret_cast<decltype(&cublasGetMathMode)>(lib.sym("cublasGetMathMode"))};
    }();
    return api;
  }
};

void check(cublasStatus_t status, const char* what) {
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
Mat row_major(const void* data, int64_t rows, int64_t cols, int64_t ld) {
  return {data, rows, cols, false, ld};
}

Mat transposed(const Mat& m) {
  return {m.data, m.cols, m.rows, !m.col_major, m.ld};
}

// Rows [r, r + len) or columns [c, c + len) of m, elements of `size` bytes.
Mat row_block(const Mat& m, int64_t r, int64_t len, int64_t size) {
  const int64_t step = m.col_major ? 1 : m.ld;
  return {static_cast<const char*>(m.data) + r * step * size, len, m.cols, m.col_major, m.ld};
}
Mat col_block(const Mat& m, int64_t c, int64_t len, int64_t size) {
  const int64_t step = m.col_major ? m.ld : 1;
  return {static_cast<const char*>(m.data) + c * step * size, m.rows, len, m.col_major, m.ld};
}

// A 2-D tensor view with unit stride in one dimension as a Mat.
Mat mat_of(const at::Tensor& t) {
  const int64_t R = t.size(0), C = t.size(1), sr = t.stride(0), sc = t.stride(1);
  if ((R <= 1 || sr == 1) && (C <= 1 || sc >= std::max<int64_t>(R, 1))) {
    return {t.const_data_ptr(), R, C, true, C <= 1 ? std::max<int64_t>(R, 1) : sc};
  }
  TORCH_CHECK((C <= 1 || sc == 1) && (R <= 1 || sr >= std::max<int64_t>(C, 1)),
              "lltm_ext: internal error: a GEMM operand has strides ", t.strides(),
              " (one dimension must have unit stride)");
  return {t.const_data_ptr(), R, C, false, R <= 1 ? std::max<int64_t>(C, 1) : sr};
}

cudaDataType_t data_type(at::ScalarType t) {
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

constexpr int64_t kMaxDim = INT_MAX;
// The most elements one operand of one cuBLAS call spans (rows x ld, or columns x ld): past 2^31
// a product of 2.2e9-element d_gates came out wrong, so larger operands go in pieces.
constexpr int64_t kMaxSpan = INT_MAX;

// cuBLAS products of one dtype on the current stream of the current device, for the length of a
// call: float32 on TF32 tensor cores when `tf32`, else in full float32 (torch sets the handle's
// math mode from its matmul precision; it is restored when done). Half types accumulate in float.
class Blas {
 public:
  Blas(at::ScalarType dtype, bool tf32)
      : api_(Cublas::get()),
        handle_(at::cuda::getCurrentCUDABlasHandle()),
        stream_(c10::cuda::getCurrentCUDAStream()),
        type_(data_type(dtype)),
        size_(static_cast<int64_t>(c10::elementSize(dtype))),
        is_double_(dtype == at::kDouble),
        compute_(is_double_                      ? CUBLAS_COMPUTE_64F
                 : (dtype == at::kFloat && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F) {
    check(api_.get_math_mode(handle_, &mode_), "cublasGetMathMode");
    check(api_.set_math_mode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  ~Blas() { api_.set_math_mode(handle_, mode_); }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  int64_t element_size() const { return size_; }

  // c = a @ b + beta c (beta 0 or 1), any sizes: in pieces where a dimension passes cuBLAS's int,
  // or where one operand of a call would span more than kMaxSpan elements (rows of c, columns of
  // c, or K accumulated); K = 0 leaves beta c.
  void gemm(const Mat& a, const Mat& b, const Mat& c, double beta) const {
    const int64_t M = c.rows, N = c.cols, K = a.cols;
    TORCH_CHECK(beta == 0 || beta == 1, "lltm_ext: internal error: beta must be 0 or 1");
    if (M == 0 || N == 0) {
      return;
    }
    if (K == 0) {
      if (beta == 0) {  // c = 0, a strided block
        const int64_t width = c.col_major ? M : N, height = c.col_major ? N : M;
        C10_CUDA_CHECK(cudaMemset2DAsync(const_cast<void*>(c.data), c.ld * size_, 0, width * size_,
                                         height, stream_));
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
        const Mat cc = col_block(row_block(c, r, rows, size_), q, cols, size_);
        for (int64_t p = 0; p < K; p += pk) {
          const int64_t depth = std::min(pk, K - p);
          call(col_block(row_block(a, r, rows, size_), p, depth, size_),
               col_block(row_block(b, p, depth, size_), q, cols, size_), cc, p == 0 ? beta : 1.0);
        }
      }
    }
  }

 private:
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
    check(api_.gemm_ex(handle_, op_x, op_y, m, n, static_cast<int>(a.cols), alpha_p, x.data, type_,
                       ld_x, y.data, type_, ld_y, beta_p, const_cast<void*>(c.data), type_,
                       static_cast<int>(c.ld), compute_, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  }

  const Cublas& api_;
  cublasHandle_t handle_;
  cudaStream_t stream_;
  cudaDataType_t type_;
  int64_t size_;
  bool is_double_;
  cublasComputeType_t compute_;
  cublasMath_t mode_ = CUBLAS_DEFAULT_MATH;
};

// LLTM_EXT_SEQUENCE_PATH, read at every call: "auto" (default: the cluster kernels where they
// apply, else the wide-state kernels where they pay, else the fused step kernels, else cuBLAS),
// "cluster" or "wide" (those kernels, an error where they do not apply: tests use it to know that
// they ran), "grid" (the fused step kernels where they apply, never the cluster or wide ones),
// "cublas" (none of them: the recurrent product through cuBLAS and the gate kernel every step).
enum class SequencePath { kAuto, kCluster, kWide, kGrid, kCublas };

SequencePath sequence_path_setting() {
  const char* env = std::getenv("LLTM_EXT_SEQUENCE_PATH");
  const std::string value = env != nullptr ? env : "";
  if (value.empty() || value == "auto") {
    return SequencePath::kAuto;
  }
  if (value == "cluster") {
    return SequencePath::kCluster;
  }
  if (value == "wide") {
    return SequencePath::kWide;
  }
  if (value == "cublas") {
    return SequencePath::kCublas;
  }
  TORCH_CHECK(value == "grid",
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_PATH must be auto, cluster, wide, grid or "
              "cublas, but got '",
              value, "'.");
  return SequencePath::kGrid;
}

// LLTM_EXT_SEQUENCE_PRODUCT, read at every call: "auto" (default: the cluster and wide-state
// kernels' recurrent product on the tensor cores for the half types, whose values tf32 holds
// exactly, and for float32 where `tf32` allows it, i.e. torch.backends.cudnn.rnn.fp32_precision is
// "tf32"; float64 on the SIMT cores) or "simt" (the SIMT cores always: for measurements and
// tests).
bool sequence_product_mma(at::ScalarType dtype, bool tf32) {
  const char* env = std::getenv("LLTM_EXT_SEQUENCE_PRODUCT");
  const std::string value = env != nullptr ? env : "";
  TORCH_CHECK(value.empty() || value == "auto" || value == "simt",
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_PRODUCT must be auto or simt, but got '",
              value, "'.");
  if (value == "simt" || dtype == at::kDouble) {
    return false;
  }
  return dtype != at::kFloat || tf32;
}

// Whether the sequence's steps run fused on `device` (lltm.h), and whether steps overlap there.
struct StepPlan {
  bool fused, overlap;
};

StepPlan step_plan(int device, int64_t batch, int64_t state, int64_t element_size) {
  const cuda::DeviceLimits& f = cuda::device_limits(device);
  const SequencePath setting = sequence_path_setting();
  const bool fused = (setting == SequencePath::kAuto || setting == SequencePath::kGrid) &&
                     state > 0 && state <= kFusedStepMaxState && batch > 0 &&
                     batch <= 65535LL * 8 &&
                     sequence_step_smem_bytes(state, element_size) <= f.smem_optin;
  return {fused, f.major >= 9};
}

// Whether the sequence's steps run on the cluster kernels, and in which shape.
struct ClusterPlan {
  bool use;
  ClusterShape shape;
};

// The cluster kernels apply on sm_90 GPUs that run this module's sm_90 code, for 1 <= S <=
// kClusterMaxState and B >= 1, where the shared memory fits. Batch rows per cluster: the fewest
// (of 2, 4, 8, 16) whose clusters all run at once (the most SMs, the least work per block), else
// the most that fit (clusters then run in turns: they never wait on each other). The product on the
// tensor cores as sequence_product_mma says (`tf32`: float32 may use TF32), for slices of 8 or 16
// rows.
// LLTM_EXT_SEQUENCE_CLUSTER_ROWS (2, 4, 8 or 16; read at every call) forces the rows, for
// measurements.
template <typename T>
ClusterPlan cluster_plan(int device, int64_t batch, int64_t state, bool tf32) {
  const SequencePath setting = sequence_path_setting();
  ClusterPlan plan{false, {}};
  if (setting != SequencePath::kAuto && setting != SequencePath::kCluster) {
    return plan;
  }
  const cuda::DeviceLimits& f = cuda::device_limits(device);
  static cuda::PerDevice<bool> loaded_cache;  // whether the device runs the sm_90 kernels
  const bool loaded = f.major >= 9 && loaded_cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
    bool is_loaded = false;
    C10_CUDA_CHECK(cluster_image_loaded<T>(&is_loaded));
    return is_loaded;
  });
  if (loaded && batch >= 1 && state >= 1 && state <= kClusterMaxState) {
    static std::mutex mutex;
    static std::map<std::tuple<int, int64_t, int, bool>, std::pair<int, int>> resident;
    const bool mma = sequence_product_mma(c10::CppTypeToScalarType<T>::value, tf32);
    const char* forced_env = std::getenv("LLTM_EXT_SEQUENCE_CLUSTER_ROWS");
    const int forced = forced_env != nullptr ? std::atoi(forced_env) : 0;
    for (const int rows : {2, 4, 8, 16}) {
      if (forced > 0 && rows != forced) {
        continue;
      }
      // The tensor cores pay from 8-row slices on: a 16-row mma tile holds the slice, and with 2 or
      // 4 rows most of it is padding (H200, float32, T = 128, forward+backward: B = 256, S = 128,
      // 16 rows: 1302 vs 1408 us SIMT; S = 256: 2765 vs 4402 us; but B = 16, 2 rows: S = 128 579
      // vs 504 us, S = 256 881 vs 698 us).
      const ClusterShape cs = cluster_shape(state, rows, mma && rows >= 8);
      if (!cluster_shape_ok(cs) || cluster_smem_bytes(cs, false, sizeof(T)) > f.smem_optin ||
          cluster_smem_bytes(cs, true, sizeof(T)) > f.smem_optin) {
        continue;
      }
      std::pair<int, int> counts;
      {
        const std::lock_guard<std::mutex> lock(mutex);
        const auto key = std::make_tuple(device, state, rows, cs.mma);
        auto it = resident.find(key);
        if (it == resident.end()) {
          int fwd = 0, bwd = 0;
          C10_CUDA_CHECK(prepare_cluster_steps<T>(f.smem_optin, cs, &fwd, &bwd));
          it = resident.emplace(key, std::make_pair(fwd, bwd)).first;
        }
        counts = it->second;
      }
      if (counts.first < 1 || counts.second < 1) {
        continue;
      }
      plan = {true, cs};
      if ((batch + rows - 1) / rows <= std::min(counts.first, counts.second)) {
        break;
      }
    }
  }
  TORCH_CHECK(plan.use || setting != SequencePath::kCluster,
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_PATH=cluster, but the cluster kernels do "
              "not apply to cuda:",
              device, " (compute capability ", f.major, ", sm_90 code ",
              loaded ? "loaded" : "not loaded", "), batch ", batch, ", state ", state,
              " (they need an sm_90 GPU running this module's sm_90 code, batch >= 1 and 1 <= "
              "state <= ",
              kClusterMaxState, ").");
  return plan;
}

// Columns per block of the wide-state kernels for (batch, state) on `device`, 0 when they do
// not run, and whether their product runs on the tensor cores (sequence_product_mma, where the
// device runs their sm_80+ code). They apply for S % 4 == 0, S <= kWideMaxState, where their grid
// runs at once on the GPU (wide_step_columns). With the tensor cores auto takes them wherever they
// apply (a block reads its slice once per step); on the SIMT cores for S <= 512 and S^2 B <=
// 2^24: there a step's product
// (3 S^2 B multiply-adds on the SIMT cores, each block reading its W_h slice from shared memory
// once per batch row, and the whole of x from L2) takes less than cuBLAS's tensor-core GEMM and
// its launches. Measured on an H200, float32, T = 128, forward+backward, against cuBLAS every
// step: B = 16, S = 512 2.2 vs 4.3-4.6 ms; B = 64, S = 512 3.5 vs 4.6-5.0 ms; but B = 16, S =
// 1024 4.5-4.6 vs 4.4-5.2 ms (no gain: twice the L2 traffic per step), B = 32, S = 1024 6.0 ms,
// bfloat16 B = 128, S = 512 5.8 vs 4.0 ms. Against the fused step kernels at S <= 256 (B = 16 ..
// 256) they were faster at every size: 845 vs 1850 us at B = 16, S = 128.
// LLTM_EXT_SEQUENCE_WIDE_COLS (4, 8 or 16; read at every call) forces the columns, for
// measurements.
struct WidePlan {
  int cols;  // 0: the wide kernels do not run
  bool mma;
};

template <typename T>
WidePlan wide_plan(int device, int64_t batch, int64_t state, bool tf32) {
  const SequencePath setting = sequence_path_setting();
  if (setting != SequencePath::kWide && setting != SequencePath::kAuto) {
    return {0, false};
  }
  const int smem_optin = cuda::device_limits(device).smem_optin;
  static cuda::PerDevice<bool> mma_cache;  // whether the device runs the tensor-core kernels
  const bool mma_loaded = mma_cache.get(device, [](int d) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
    bool is_loaded = false;
    C10_CUDA_CHECK(wide_mma_loaded<T>(&is_loaded));
    return is_loaded;
  });
  // The half types take the tensor cores past S = 512 only: at S = 512 their SIMT product was the
  // faster (H200, bfloat16, T = 128, forward+backward: B = 16 2315 vs 2560 us, B = 64 2502 vs
  // 2624 us; S = 1024, B = 16: 4361 us on the tensor cores vs 5018 us), where float32's tensor
  // cores won at both (B = 16 1981 vs 2478 us, B = 64 2164 vs 2725 us).
  const at::ScalarType dtype = c10::CppTypeToScalarType<T>::value;
  const bool mma =
      mma_loaded && sequence_product_mma(dtype, tf32) && (dtype == at::kFloat || state > 512);
  if (setting == SequencePath::kAuto && !mma &&
      (state > 512 || state * state * batch > (int64_t{1} << 24))) {
    return {0, false};
  }
  static std::mutex mutex;
  static std::map<std::tuple<int, int64_t, int64_t, bool>, int> columns;
  // The choice depends on the batch through its row blocks only.
  const int64_t row_blocks = (batch + kWideRows - 1) / kWideRows;
  int cols = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(device, row_blocks, state, mma);
    auto it = columns.find(key);
    if (it == columns.end()) {
      int c = 0;
      C10_CUDA_CHECK(
          wide_step_columns<T>(batch, state, cuda::sm_count(device), smem_optin, &c, 0, mma));
      it = columns.emplace(key, c).first;
    }
    cols = it->second;
  }
  const char* forced_env = std::getenv("LLTM_EXT_SEQUENCE_WIDE_COLS");
  if (cols > 0 && forced_env != nullptr) {
    const int forced = std::atoi(forced_env);
    TORCH_CHECK(forced == 4 || forced == 8 || forced == 16,
                "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_WIDE_COLS must be 4, 8 or 16, but got '",
                forced_env, "'.");
    int c = 0;  // whether the forced columns fit: ask for them alone
    C10_CUDA_CHECK(
        wide_step_columns<T>(batch, state, cuda::sm_count(device), smem_optin, &c, forced, mma));
    cols = c;
  }
  TORCH_CHECK(cols > 0 || setting != SequencePath::kWide,
              "lltm_ext.lltm_sequence: LLTM_EXT_SEQUENCE_PATH=wide, but the wide-state kernels do "
              "not apply to cuda:",
              device, " with batch ", batch, ", state ", state,
              " (they need a state that is a multiple of 4 and at most ", kWideMaxState,
              ", and a grid of ", kWideRows,
              "-row blocks that runs at once on the GPU, with a cooperative launch).");
  return {cols, mma};
}

// The wide kernels' barrier counters: device memory on like's device, from the caching allocator
// (freed when the caller returns; the launch on the current stream, which allocated it, is
// ordered before any reuse).
at::Tensor wide_flags(const at::Tensor& like, int64_t batch, int64_t state, int cols) {
  return at::empty({wide_flag_count(batch, state, cols)}, like.options().dtype(at::kInt));
}

}  // namespace

void gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double beta,
               bool tf32) {
  const c10::cuda::CUDAGuard guard(c.device());
  Blas(c.scalar_type(), tf32).gemm(mat_of(a), mat_of(b), mat_of(c), beta);
}

void sequence_forward_cuda(const at::Tensor& input, const at::Tensor& weights,
                           const at::Tensor& bias, const at::Tensor& h0, const at::Tensor& c0,
                           const at::Tensor& output, const at::Tensor& cells,
                           const at::Tensor& gates, bool tf32) {
  const c10::cuda::CUDAGuard guard(input.device());
  const int sms = cuda::sm_count(input.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const Blas blas(input.scalar_type(), tf32);
  const int64_t T = input.size(0), B = input.size(1), I = input.size(2), S = h0.size(1);
  const int64_t es = blas.element_size();
  const Mat w = row_major(weights.const_data_ptr(), 3 * S, S + I, S + I);
  const Mat w_h = col_block(w, 0, S, es), w_i = col_block(w, S, I, es);
  // The input projections of all steps, one product: gates = input W_i^T.
  blas.gemm(row_major(input.const_data_ptr(), T * B, I, I), transposed(w_i),
            row_major(gates.const_data_ptr(), T * B, 3 * S, 3 * S), 0);
  LLTM_EXT_DISPATCH_FLOATING(input.scalar_type(), "lltm_sequence_forward_cuda", [&] {
    const scalar_t* b = bias.const_data_ptr<scalar_t>();
    scalar_t* out = output.mutable_data_ptr<scalar_t>();
    scalar_t* cell = cells.mutable_data_ptr<scalar_t>();
    scalar_t* g = gates.mutable_data_ptr<scalar_t>();
    const scalar_t* wp = weights.const_data_ptr<scalar_t>();
    const int64_t n = B * S;
    if (T > 0 && B > 0) {
      const ClusterPlan cluster = cluster_plan<scalar_t>(input.get_device(), B, S, tf32);
      if (cluster.use) {  // all steps in one launch of thread-block clusters (sm_90)
        C10_CUDA_CHECK(launch_cluster_forward<scalar_t>(g, b, h0.const_data_ptr<scalar_t>(),
                                                        c0.const_data_ptr<scalar_t>(), wp, S + I,
                                                        out, cell, B, T, cluster.shape, stream));
        return;
      }
    }
    const WidePlan wide =
        T > 0 && B > 0 ? wide_plan<scalar_t>(input.get_device(), B, S, tf32) : WidePlan{0, false};
    if (wide.cols > 0) {  // all steps in one cooperative launch over the GPU
      const at::Tensor flags = wide_flags(input, B, S, wide.cols);
      C10_CUDA_CHECK(launch_wide_forward<scalar_t>(
          g, b, h0.const_data_ptr<scalar_t>(), c0.const_data_ptr<scalar_t>(), wp, S + I, out, cell,
          reinterpret_cast<unsigned int*>(flags.mutable_data_ptr<int32_t>()), B, S, T, wide.cols,
          wide.mma, stream));
      return;
    }
    const StepPlan plan = step_plan(input.get_device(), B, S, es);
    if (plan.fused && T > 0) {  // the recurrent product and the gate math in one kernel
      bool all_at_once = false;
      C10_CUDA_CHECK(prepare_sequence_steps<scalar_t>(B, S, sms, &all_at_once));
      for (int64_t t = 0; t < T; t += all_at_once ? T : 1) {
        C10_CUDA_CHECK(launch_sequence_forward_steps<scalar_t>(
            g, b, h0.const_data_ptr<scalar_t>(), c0.const_data_ptr<scalar_t>(), wp, S + I, out,
            cell, B, S, t, all_at_once ? T : 1, plan.overlap, stream));
      }
      return;
    }
    for (int64_t t = 0; t < T; ++t) {
      const scalar_t* h_prev = t == 0 ? h0.const_data_ptr<scalar_t>() : out + (t - 1) * n;
      const scalar_t* c_prev = t == 0 ? c0.const_data_ptr<scalar_t>() : cell + (t - 1) * n;
      scalar_t* g_t = g + t * 3 * n;
      blas.gemm(row_major(h_prev, B, S, S), transposed(w_h), row_major(g_t, B, 3 * S, 3 * S), 1);
      C10_CUDA_CHECK(launch_forward_gates<scalar_t>(g_t, b, c_prev, out + t * n, cell + t * n, n, S,
                                                    sms, stream));
    }
  });
}

void sequence_backward_cuda(const at::Tensor& grad_output, const at::Tensor& grad_h_n,
                            const at::Tensor& grad_c_n, const at::Tensor& weights,
                            const at::Tensor& bias, const at::Tensor& cells,
                            const at::Tensor& gates, const at::Tensor& d_gates,
                            const at::Tensor& d_h, const at::Tensor& d_c, bool tf32) {
  const c10::cuda::CUDAGuard guard(cells.device());
  const int sms = cuda::sm_count(cells.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const Blas blas(cells.scalar_type(), tf32);
  const int64_t T = cells.size(0), B = cells.size(1), S = cells.size(2);
  const int64_t I = weights.size(1) - S, es = blas.element_size();
  const Mat w_h = col_block(row_major(weights.const_data_ptr(), 3 * S, S + I, S + I), 0, S, es);
  LLTM_EXT_DISPATCH_FLOATING(cells.scalar_type(), "lltm_sequence_backward_cuda", [&] {
    const scalar_t* go = grad_output.const_data_ptr<scalar_t>();
    const scalar_t* cell = cells.const_data_ptr<scalar_t>();
    const scalar_t* g = gates.const_data_ptr<scalar_t>();
    const scalar_t* b = bias.const_data_ptr<scalar_t>();
    scalar_t* dg = d_gates.mutable_data_ptr<scalar_t>();
    scalar_t* dh = d_h.mutable_data_ptr<scalar_t>();
    scalar_t* dc[2] = {d_c.mutable_data_ptr<scalar_t>(), d_c.mutable_data_ptr<scalar_t>() + B * S};
    const scalar_t* wp = weights.const_data_ptr<scalar_t>();
    const scalar_t* gh_n = grad_h_n.const_data_ptr<scalar_t>();
    const int64_t n = B * S;
    if (T > 0 && B > 0) {
      const ClusterPlan cluster = cluster_plan<scalar_t>(cells.get_device(), B, S, tf32);
      if (cluster.use) {  // all steps in one launch of thread-block clusters (sm_90)
        C10_CUDA_CHECK(launch_cluster_backward<scalar_t>(dg, wp, S + I, go, gh_n,
                                                         grad_c_n.const_data_ptr<scalar_t>(), cell,
                                                         g, b, dc[0], B, T, cluster.shape, stream));
        blas.gemm(row_major(dg, B, 3 * S, 3 * S), w_h, row_major(dh, B, S, S), 0);  // d h0
        return;
      }
    }
    const WidePlan wide =
        T > 0 && B > 0 ? wide_plan<scalar_t>(cells.get_device(), B, S, tf32) : WidePlan{0, false};
    if (wide.cols > 0) {  // all steps in one cooperative launch over the GPU
      const at::Tensor flags = wide_flags(cells, B, S, wide.cols);
      C10_CUDA_CHECK(launch_wide_backward<scalar_t>(
          dg, wp, S + I, go, gh_n, grad_c_n.const_data_ptr<scalar_t>(), cell, g, b, dc[0],
          reinterpret_cast<unsigned int*>(flags.mutable_data_ptr<int32_t>()), B, S, T, wide.cols,
          wide.mma, stream));
      blas.gemm(row_major(dg, B, 3 * S, 3 * S), w_h, row_major(dh, B, S, S), 0);  // d h0
      return;
    }
    const StepPlan plan = step_plan(cells.get_device(), B, S, es);
    if (plan.fused && T > 0) {  // dL/dh_t's product and the gate math in one kernel
      bool all_at_once = false;
      C10_CUDA_CHECK(prepare_sequence_steps<scalar_t>(B, S, sms, &all_at_once));
      for (int64_t t = T - 1; t >= 0; t -= all_at_once ? T : 1) {
        C10_CUDA_CHECK(launch_sequence_backward_steps<scalar_t>(
            dg, wp, S + I, go, gh_n, grad_c_n.const_data_ptr<scalar_t>(), cell, g, b, dc[0], B, S,
            T - 1, t, all_at_once ? T : 1, plan.overlap, stream));
      }
      // d h0 = dG_0 W_h
      blas.gemm(row_major(dg, B, 3 * S, 3 * S), w_h, row_major(dh, B, S, S), 0);
      return;
    }
    for (int64_t t = T - 1; t >= 0; --t) {
      // dL/dc_t: grad_c_n, or from step t + 1.
      const scalar_t* gc = t == T - 1 ? grad_c_n.const_data_ptr<scalar_t>() : dc[(t + 1) % 2];
      scalar_t* dg_t = dg + t * 3 * n;
      // dL/dh_t = grad_output[t] + (grad_h_n, or d h_t from step t + 1).
      const scalar_t* gh = t == T - 1 ? gh_n : dh;
      C10_CUDA_CHECK(launch_backward_gates<scalar_t>(gh, S, go + t * n, gc, cell + t * n,
                                                     g + t * 3 * n, b, dg_t, dc[t % 2], nullptr,
                                                     nullptr, n, S, sms, stream));
      blas.gemm(row_major(dg_t, B, 3 * S, 3 * S), w_h, row_major(dh, B, S, S), 0);  // d h_{t-1}
    }
  });
}

}  // namespace lltm_ext::lltm
