// What the GEMM's CUDA host files share (C++ compiler, CUDA builds only): the operand description
// the kernels read, and the tensor-core entry point (gemm_tc_cuda_host.cpp) that gemm_cuda
// (gemm_cuda_host.cpp) calls for bfloat16 / float16 and for float32 with TF32 allowed.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/cuda_host.h"
#include "gemm/gemm_launchers.h"
#include "gemm/gemm_tc_plan.h"

namespace lltm_ext::gemm {

// One operand as the kernels read it.
struct Operand {
  const void* data;
  int64_t ld;
  bool k_contig;  // K is the unit-stride dimension
  bool vec;       // 4-element vector loads allowed
};

inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// c (contiguous, T) = the sum of the `splits` slices of `partial` (splits x c.numel() elements of
// Acc), added in a fixed order (deterministic): in split order, or from 8 splits on, each eighth of
// the splits in order and then the eighths in order. The split-K reduction, on `stream`.
template <typename Acc, typename T>
void reduce_splits(const at::Tensor& partial, const at::Tensor& c, int splits,
                   cudaStream_t stream) {
  const int64_t n = c.numel();
  const bool vec = n % 4 == 0 && aligned(c.data_ptr(), std::min<size_t>(16, 4 * sizeof(T)));
  if (splits >= 8) {  // each lane's chain of dependent loads cut eightfold (skinny long-K products)
    const unsigned int blocks =
        cuda::grid_for(vec ? n / 4 : n, 32, c.get_device(), /*blocks_per_sm=*/8);
    C10_CUDA_CHECK((launch_splitk_reduce_grouped<Acc, T>(
        partial.data_ptr<Acc>(), static_cast<T*>(c.data_ptr()), n, splits, vec, blocks, stream)));
    return;
  }
  constexpr int threads = 256;
  const unsigned int blocks =
      cuda::grid_for(vec ? n / 4 : n, threads, c.get_device(), /*blocks_per_sm=*/4);
  C10_CUDA_CHECK(
      (launch_splitk_reduce<Acc, T>(partial.data_ptr<Acc>(), static_cast<T*>(c.data_ptr()), n,
                                    splits, vec, blocks, threads, stream)));
}

// t (a with is_a: M x K; else b: K x N) as an Operand; t has a layout_of().
Operand operand_of(const at::Tensor& t, bool is_a);

// c (M x N, contiguous) = a @ b on the tensor cores, as plan_tensor_core() picks for the current
// device (or as `force` and LLTM_EXT_GEMM_HALF_PATH force), for bfloat16 / float16 operands, or
// float32 ones as TF32; M, N, K > 0. Returns false, having launched nothing, when the device runs
// no tensor-core kernel (or the setting is "simt"): the caller runs the SIMT kernels then.
bool run_tensor_core(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                     cudaStream_t stream, const TcForce& force = {});

// c (M x N, contiguous) = a @ b on the wgmma kernel's narrow tiles (128 x 16 for a side of at most
// 16, else 128 x 32 up to kNarrowSide: that side streamed past the other operand's tiles of 128 or
// 64 rows; docs/decisions.md#narrow-tile)
// where it runs: bfloat16 / float16 on the sm_90a image, the small side's operand K-contiguous,
// both operands' rows 16-byte aligned; with M <= N swapped (C^T = b^T a^T, C stored transposed).
// `splits` K splits, 0 for narrow_splits'; tiles of `rows` rows of the large side, 64 or 128, 0
// for the rule's. Returns false, having launched nothing, elsewhere. M, N > 0.
constexpr int64_t kNarrowSide = 32;
bool run_narrow(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, cudaStream_t stream,
                int64_t splits = 0, int rows = 0);

// The narrow tile's K splits for `tiles` tiles over K on `sms` SMs: none unless the tiles leave
// two thirds of the SMs idle, else one round of items, at most kNarrowMaxSplits, each at least
// kNarrowMinSplitSteps K steps.
constexpr int64_t kNarrowMaxSplits = 8, kNarrowMinSplitSteps = 8;
int64_t narrow_splits(int64_t tiles, int64_t K, int sms);

// The narrow tile's rows of the large side L: 64 where 128-row tiles would run unsplit on at most
// half the SMs (twice the blocks, still one wave), else 128.
int narrow_rows(int64_t L, int64_t K, int sms);

// Whether LLTM_EXT_GEMM_HALF_PATH / set_cuda_half_path() force a kernel (not "auto"): then the
// half types (and float32 where TF32 is allowed) run that kernel, not the short-K or small-product
// ones.
bool half_path_forced();

// Whether the current device runs this module's mma.sync code (its loaded image is sm_80 or newer).
bool mma_runs_here();

// Whether the current device runs this module's wgmma code (a Hopper GPU and its sm_90a image).
bool wgmma_runs_here();

// The plan run_tensor_core would run for a @ b on the current device (kernel kNone: none), unless
// it swaps: then cuda_tc_plan(b.t(), a.t()) where that is a wgmma plan.
TcPlan cuda_tc_plan(const at::Tensor& a, const at::Tensor& b, const TcForce& force = {});

// Whether run_tensor_core tries c = a @ b as its transpose on the wgmma kernel (C^T = b^T a^T,
// stored transposed; set_cuda_wgmma_knobs' swap): 16-bit, A M-major, B K-major, where the rule
// takes it (or wherever, switched on).
bool wgmma_swaps(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                 const TcForce& force = {});

// Exact float32 (TF32 not allowed) on Hopper's wgmma kernel in three tf32 passes: the plan for a @
// b (kernel kNone where the device has no wgmma kernel or LLTM_EXT_GEMM_F32 is simt), and whether
// the call takes it (tensor: always, an error where the device cannot; auto: where the plan's
// modelled time, as fitted (gemm_tc_cuda_host.cpp), is below simt_us, the SIMT schedule's).
struct ExactPlan {
  bool tensor = false;
  double simt_us = 0;
  TcPlan plan;
};
ExactPlan cuda_exact_plan(const at::Tensor& a, const at::Tensor& b, double simt_us);
// c = a @ b as cuda_exact_plan says, where it takes the tensor cores; whether it ran.
bool run_exact_tensor_core(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                           cudaStream_t stream, double simt_us);

}  // namespace lltm_ext::gemm
