// The launch of the sm_80+ tensor-core GEMM kernel (gemm/tiles/kernel_sm80.cuh) for one block
// tile, shared by the files that instantiate it: gemm_kernels_sm80.cu (16-byte-aligned operands,
// 16-byte cp.async), gemm_kernels_sm80_words.cu (4-byte-aligned operands, 4-byte cp.async) and
// gemm_kernels_sm80_any.cu (any alignment, register-staged loads).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "gemm/gemm_launchers.h"
#include "gemm/tiles/kernel_sm80.cuh"

namespace lltm_ext::gemm::mma_launch {

namespace mma = lltm_ext::gemm_tiles::mma;

// 128 x 256: 8 warps of 64 x 64 (128 accumulators per thread: half the shared-memory fragment
// reads per mma of a 64 x 32 warp tile), 4 stages (96 KB, under the 99 KB a block may have on
// sm_86 / sm_89 / sm_120), 1 block per SM. 128 x 128: 4 warps of 64 x 64, 4 stages (64 KB), 2
// blocks per SM (8 warps of 64 x 32 measured slower on the H200: twice the fragment reads per mma;
// docs/decisions.md#mma-tile-128). 64 x 64: 4 warps of 32 x 32, 4 stages (32 KB), 4 blocks per SM;
// tiles that would leave SMs idle, and the only tile of the register-staged (any alignment) path.
using Tile256 = mma::MmaTile<128, 256, 2, 4, 4, 1>;
using Tile128 = mma::MmaTile<128, 128, 2, 2, 4, 2>;
using Tile64 = mma::MmaTile<64, 64, 2, 2, 4, 4>;

using MmaKernel = void (*)(mma::MmaParams);

template <typename Tile, int DT, int LOAD>
MmaKernel kernel_for(bool a_k, bool b_k) {
  if (a_k && b_k) return &mma::gemm_mma_kernel<Tile, DT, true, true, LOAD>;
  if (a_k) return &mma::gemm_mma_kernel<Tile, DT, true, false, LOAD>;
  if (b_k) return &mma::gemm_mma_kernel<Tile, DT, false, true, LOAD>;
  return &mma::gemm_mma_kernel<Tile, DT, false, false, LOAD>;
}

// Launches g's kernel with block tile Tile and stage loads LOAD (mma::StageLoad): a grid of tiles
// x splits blocks.
template <typename Tile, int LOAD>
cudaError_t launch_tile(const MmaGemm& g, cudaStream_t stream) {
  const MmaKernel kernel =
      g.type == kMmaTf32       ? kernel_for<Tile, mma::kMmaTF32, LOAD>(g.a_kcontig, g.b_kcontig)
      : g.type == kMmaBFloat16 ? kernel_for<Tile, mma::kMmaBF16, LOAD>(g.a_kcontig, g.b_kcontig)
                               : kernel_for<Tile, mma::kMmaF16, LOAD>(g.a_kcontig, g.b_kcontig);
  if (Tile::SMEM_BYTES > 48 * 1024) {  // above the default dynamic shared memory limit: opt in
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::SMEM_BYTES);
    if (err != cudaSuccess) return err;
  }
  mma::MmaParams p;
  p.a = g.a;
  p.b = g.b;
  p.c = g.c;
  p.M = static_cast<int>(g.M);
  p.N = static_cast<int>(g.N);
  p.K = static_cast<int>(g.K);
  p.lda = g.lda;
  p.ldb = g.ldb;
  p.ldc = g.ldc;
  p.tiles_m = static_cast<int>((g.M + Tile::BM - 1) / Tile::BM);
  p.tiles_n = static_cast<int>((g.N + Tile::BN - 1) / Tile::BN);
  const int elem = g.type == kMmaTf32 ? 4 : 2;
  p.vec_c = g.ldc % (16 / elem) == 0 && reinterpret_cast<uintptr_t>(g.c) % 16 == 0;
  const int splits = g.splits > 1 ? g.splits : 1;
  p.k_split = splits > 1 ? static_cast<int>(g.k_split) : static_cast<int>(g.K);
  p.partial = splits > 1 ? g.partial : nullptr;
  const int64_t tiles = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
  if (tiles > INT_MAX || splits > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned int>(tiles), static_cast<unsigned int>(splits));
  kernel<<<grid, Tile::THREADS, Tile::SMEM_BYTES, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace lltm_ext::gemm::mma_launch
