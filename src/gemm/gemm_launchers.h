// The launchers of the GEMM's CUDA kernels: what the host code (gemm_cuda_host.cpp, C++ compiler)
// calls and the kernel files (gemm_kernels_*.cu, nvcc) define. Plain C++ with CUDA runtime types:
// no device code here (the kernels are in gemm/tiles/).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm/gemm_configs.h"

namespace lltm_ext::gemm {

// Launchers, defined in gemm_kernels.cuh and instantiated in the gemm_kernels_*.cu files for the
// configs of gemm_configs.h. Each returns the CUDA error of its launch (or query).

// C = A B with config Cfg on `stream` (see gemm_tiles::launch_tiles), for either layout of A and
// of B (a_kcontig: A is row-major; b_kcontig: B is a transposed row-major matrix).
template <typename Cfg, typename T, typename OutT>
cudaError_t launch(const gt::Params<T, OutT>& p, bool a_kcontig, bool b_kcontig, int splits,
                   cudaStream_t stream);

// Resident blocks per SM of config Cfg's float32 kernel (row-major A and B) on the current device,
// its dynamic shared memory allowed first.
template <typename Cfg>
cudaError_t blocks_per_sm(int* blocks);

// The PTX version the loaded image of config Cfg's float32 kernel was compiled from on the current
// device (e.g. 90; 75 when the driver compiled compute_75 PTX for a newer GPU).
template <typename Cfg>
cudaError_t ptx_version(int* version);

// c[i] = sum over s < splits of partial[s * n + i] (gemm_tiles::splitk_reduce_kernel).
template <typename Acc, typename OutT>
cudaError_t launch_splitk_reduce(const Acc* partial, OutT* c, int64_t n, int splits, bool vec,
                                 unsigned int blocks, int threads, cudaStream_t stream);

// Tail split-K's reduction into C (gemm_tiles::tail_reduce_kernel) for config Cfg's tiles.
template <typename Cfg, typename T>
cudaError_t launch_tail_reduce(const T* partial, T* c, int M, int N, int64_t ldc, int main_tiles,
                               int tail_tiles, int splits, bool vec_c, unsigned int blocks,
                               int threads, cudaStream_t stream);

}  // namespace lltm_ext::gemm
