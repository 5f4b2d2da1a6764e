// Launching the tiled GEMM kernels: a config's kernel for one layout pair, its shared-memory
// allowance, its grid. Including this header brings in every kernel of the GEMM (gemm/tiles/).
//
// Plain CUDA (no ATen), so that benchmarks/gemm_steps/ times the very same kernel. Design:
//   - a BM x BN block tile of C per thread block, walked along K in steps of BK;
//   - each warp owns a WM x WN warp tile, each thread a TM x TN register tile made of 4 x 4
//     sub-blocks spread over the warp tile, so that one warp's 16-byte shared-memory reads are
//     broadcasts over consecutive addresses (no bank conflicts) and its C stores are coalesced;
//   - both operands are staged in shared memory "K-major" (As[k][m], Bs[k][n]), whatever their
//     layout in global memory: a K-contiguous operand is transposed on its way through registers;
//   - two pipelines for the global -> shared copies, one barrier per K step either way:
//     STAGES == 0: register-staged double buffering (loads of the next K step issued before the
//     current step's math, stored after it; converts half types to float on the way), and
//     STAGES >= 2: a cp.async ring of STAGES shared buffers for float32 and float64, where a
//     K-contiguous operand takes the path its config names (KPath: through registers one step
//     ahead, element-wise async copies, or, for A, kept K-major);
//   - 16-byte (4-element) global accesses when the operand's layout and alignment allow,
//     per-element predicated ones otherwise; all element offsets are 64-bit.
// One header per part (namespace gemm_tiles): tile_types.h (configs, launch parameters; plain
// C++), vector_access.cuh (4-element loads and stores), cp_async.cuh (async copy instructions),
// operand_tile.cuh and operand_tile_async.cuh (an operand's tile into shared memory through
// registers, resp. by cp.async), tile_position.cuh (a block's and a thread's place),
// mma_k_step.cuh (one K step of math), epilogue.cuh (results to C or a workspace),
// kernel_staged.cuh and kernel_multistage.cuh (the two kernels), split_k_reduce.cuh (the split-K
// reductions), and this file.
#pragma once

#include <cuda_runtime.h>

#include "gemm/tiles/kernel_multistage.cuh"
#include "gemm/tiles/kernel_staged.cuh"
#include "gemm/tiles/split_k_reduce.cuh"
#include "gemm/tiles/tile_types.h"

namespace lltm_ext::gemm_tiles {

// The kernel of config Cfg (register-staged or cp.async) for one layout pair.
template <typename Cfg, typename T, typename Acc, typename OutT, bool A_KCONTIG, bool B_KCONTIG>
constexpr auto kernel_of() {
  if constexpr (Cfg::STAGES == 0) {
    return &gemm_tile_kernel<Cfg, T, Acc, OutT, A_KCONTIG, B_KCONTIG>;
  } else {
    static_assert(sizeof(T) == sizeof(Acc), "cp.async configs copy T straight into shared");
    return &gemm_async_kernel<Cfg, T, OutT, A_KCONTIG, B_KCONTIG>;
  }
}

// Allows `kernel` (of that layout pair) its dynamic shared memory when that is above the default
// 48 KB limit.
template <typename Cfg, typename Acc, bool A_KCONTIG = true, bool B_KCONTIG = false,
          typename Kernel>
cudaError_t allow_smem(Kernel kernel) {
  constexpr size_t smem = Cfg::template smem_bytes<Acc, A_KCONTIG, B_KCONTIG>();
  if constexpr (smem > 48 * 1024) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  }
  return cudaSuccess;
}

// Launches the kernel of config Cfg for one layout pair on `stream` with `splits` K splits;
// returns the launch error (cudaSuccess when fine). The caller checks M, N > 0 and fills
// p.k_split. cp.async configs need T == Acc. With tail split-K (p.tail_splits > 0, splits 1) the
// grid holds main_tiles + tail_tiles * tail_splits blocks.
template <typename Cfg, typename T, typename Acc, typename OutT, bool A_KCONTIG, bool B_KCONTIG>
cudaError_t launch_tiles(const Params<T, OutT>& p, int splits, cudaStream_t stream) {
  const auto kernel = kernel_of<Cfg, T, Acc, OutT, A_KCONTIG, B_KCONTIG>();
  const cudaError_t err = allow_smem<Cfg, Acc, A_KCONTIG, B_KCONTIG>(kernel);
  if (err != cudaSuccess) return err;
  const unsigned int blocks =
      p.tail_splits > 0 ? static_cast<unsigned int>(p.main_tiles + p.tail_tiles * p.tail_splits)
                        : tile_count<Cfg>(p.M, p.N);
  const dim3 grid(blocks, 1, static_cast<unsigned int>(splits));
  kernel<<<grid, Cfg::THREADS, Cfg::template smem_bytes<Acc, A_KCONTIG, B_KCONTIG>(), stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lltm_ext::gemm_tiles
