// The sequence's cluster kernels (sm_90; cluster/cluster_kernels.cuh), host side: a state's
// cluster shape and its shared memory, whether the device runs the sm_90 code, how many clusters
// run at once (the planner's facts, plan_cuda_host.cpp), and the launches.
#include <cstdint>
#include <type_traits>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/cluster/cluster_kernels.cuh"

namespace lltm_ext::lltm {
namespace {

// f(forward kernel, backward kernel) for T and the product cs asks for: the tensor cores where
// cs.mma (float32 and the half types; float64 has none: an invalid value), in three passes where
// cs.split (float32 only).
template <typename T, typename F>
cudaError_t with_cluster_kernels(const ClusterShape& cs, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (cs.mma && cs.split) {
      return f(cluster_forward_kernel<T, Product::kTf32x3>,
               cluster_backward_kernel<T, Product::kTf32x3>);
    }
  }
  if constexpr (std::is_same_v<cuda::opmath_t<T>, float>) {
    if (cs.mma && !cs.split) {
      return f(cluster_forward_kernel<T, Product::kTf32>,
               cluster_backward_kernel<T, Product::kTf32>);
    }
  }
  if (cs.mma) {
    return cudaErrorInvalidValue;
  }
  return f(cluster_forward_kernel<T, Product::kSimt>, cluster_backward_kernel<T, Product::kSimt>);
}

}  // namespace

ClusterShape cluster_shape(int64_t state, int blocks, int rows, Product product) {
  ClusterShape cs{};
  cs.state = static_cast<int>(state);
  cs.blocks = blocks;
  cs.cols = static_cast<int>((state + blocks - 1) / blocks);
  cs.rows = rows;
  cs.units = cs.cols * ((rows + kTileRows - 1) / kTileRows);
  cs.units_pow2 = 1;
  while (cs.units_pow2 < cs.units && cs.units_pow2 < kClusterThreads) {
    cs.units_pow2 *= 2;
  }
  cs.parts = kClusterThreads / cs.units_pow2;
  cs.mma = product != Product::kSimt;
  cs.split = product == Product::kTf32x3;
  return cs;
}

int64_t cluster_smem_bytes(const ClusterShape& cs, bool backward, int64_t element_size) {
  const int64_t acc = element_size == 8 ? 8 : 4;  // opmath: double, else float
  const int64_t S = cs.state, n_out = backward ? cs.cols : 3 * cs.cols;
  const int64_t ks = padded_k(static_cast<int>(backward ? 3 * S : S));
  // W_h's slice (n_out rows of ks), the exchanged rows (two buffers), the partial sums.
  const int64_t operands = (n_out + 2 * cs.rows) * ks;
  const int64_t sums =
      cs.mma ? int64_t{kMmaWarps} * kMmaRows * mma_sums_stride(static_cast<int>(n_out))
             : static_cast<int64_t>(cs.parts) * cs.units * kTileRows * (backward ? 1 : 3);
  return (operands + sums) * acc;
}

bool cluster_shape_ok(const ClusterShape& cs) {
  return cs.state >= 1 && cs.blocks >= 1 && cs.blocks <= kClusterMaxBlocks &&
         (cs.blocks & (cs.blocks - 1)) == 0 && cs.rows >= 1 && cs.rows % kTileRows == 0 &&
         static_cast<int64_t>(cs.rows) * cs.cols <=
             static_cast<int64_t>(kMaxPairs) * kClusterThreads &&
         cs.units <= kClusterThreads && cs.state <= kClusterMaxState &&
         (!cs.mma || cs.rows <= kMmaRows);
}

template <typename T>
cudaError_t cluster_image_loaded(bool* loaded) {
  // Older architectures' code holds the __trap body.
  return cuda::image_compiled_for(cluster_forward_kernel<T, Product::kSimt>, 90, loaded);
}

template <typename T>
cudaError_t prepare_cluster_steps(int max_smem, const ClusterShape& cs, int* forward_clusters,
                                  int* backward_clusters) {
  const int64_t es = sizeof(T);
  return with_cluster_kernels<T>(cs, [&](auto forward, auto backward) {
    cudaError_t err =
        cudaFuncSetAttribute(forward, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
    if (err == cudaSuccess) {
      err = cudaFuncSetAttribute(backward, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
    }
    if (err == cudaSuccess) {
      err = cuda::max_active_clusters(
          forward, static_cast<unsigned int>(cs.blocks), dim3(kClusterThreads),
          static_cast<size_t>(cluster_smem_bytes(cs, false, es)), forward_clusters);
    }
    if (err == cudaSuccess) {
      err = cuda::max_active_clusters(
          backward, static_cast<unsigned int>(cs.blocks), dim3(kClusterThreads),
          static_cast<size_t>(cluster_smem_bytes(cs, true, es)), backward_clusters);
    }
    return err;
  });
}

template <typename T>
cudaError_t launch_cluster_forward(T* gates, const T* bias, const T* h0, const T* c0, const T* w,
                                   int64_t ld, T* output, T* cells, T* h_n, T* c_n, int64_t batch,
                                   int64_t steps, const ClusterShape& cs, cudaStream_t stream) {
  const int64_t clusters = (batch + cs.rows - 1) / cs.rows;
  return with_cluster_kernels<T>(cs, [&](auto forward, auto) {
    // A programmatic dependent launch over short sequences: the kernels run only where their
    // sm_90 code does, and wait for the kernel before them first.
    return cuda::launch_dependent_clusters(
        steps <= kDependentMaxSteps, static_cast<unsigned int>(cs.blocks), forward,
        dim3(static_cast<unsigned int>(clusters * cs.blocks)), dim3(kClusterThreads),
        static_cast<size_t>(cluster_smem_bytes(cs, false, sizeof(T))), stream, gates, bias, h0, c0,
        w, ld, output, cells, h_n, c_n, batch, steps, cs);
  });
}

template <typename T>
cudaError_t launch_cluster_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                    const T* grad_h_n, const T* grad_c_n, const T* cells,
                                    const T* gates, const T* bias, T* d_cell, int64_t batch,
                                    int64_t steps, const ClusterShape& cs, cudaStream_t stream) {
  const int64_t clusters = (batch + cs.rows - 1) / cs.rows;
  return with_cluster_kernels<T>(cs, [&](auto, auto backward) {
    return cuda::launch_dependent_clusters(
        steps <= kDependentMaxSteps, static_cast<unsigned int>(cs.blocks), backward,
        dim3(static_cast<unsigned int>(clusters * cs.blocks)), dim3(kClusterThreads),
        static_cast<size_t>(cluster_smem_bytes(cs, true, sizeof(T))), stream, d_gates, w, ld,
        grad_output, grad_h_n, grad_c_n, cells, gates, bias, d_cell, batch, steps, cs);
  });
}

#define LLTM_EXT_INSTANTIATE(T)                                                              \
  template cudaError_t cluster_image_loaded<T>(bool*);                                       \
  template cudaError_t prepare_cluster_steps<T>(int, const ClusterShape&, int*, int*);       \
  template cudaError_t launch_cluster_forward<T>(T*, const T*, const T*, const T*, const T*, \
                                                 int64_t, T*, T*, T*, T*, int64_t, int64_t,  \
                                                 const ClusterShape&, cudaStream_t);         \
  template cudaError_t launch_cluster_backward<T>(                                           \
      T*, const T*, int64_t, const T*, const T*, const T*, const T*, const T*, const T*, T*, \
      int64_t, int64_t, const ClusterShape&, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
