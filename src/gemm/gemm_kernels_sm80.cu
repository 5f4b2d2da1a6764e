// The sm_80+ tensor-core GEMM's launchers (gemm_launchers.h): the instantiations of
// gemm/tiles/kernel_sm80.cuh (bf16 / fp16 / tf32, the four operand major-ness pairs, block tiles
// 128 x 256, 128 x 128 and 64 x 64), the launch, and the query of the PTX version of the image the
// device loads.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "gemm/gemm_launchers.h"
#include "gemm/tiles/kernel_sm80.cuh"

namespace lltm_ext::gemm {
namespace {

namespace mma = lltm_ext::gemm_tiles::mma;

// 128 x 256: 8 warps of 64 x 64 (128 accumulators per thread: half the shared-memory fragment
// reads per mma of a 64 x 32 warp tile), 4 stages (96 KB, under the 99 KB a block may have on
// sm_86 / sm_89 / sm_120), 1 block per SM. 128 x 128: 4 warps of 64 x 64, 4 stages (64 KB), 2
// blocks per SM (8 warps of 64 x 32 measured ~10% slower on the H200: twice the fragment reads
// per mma). 64 x 64: 4 warps of 32 x 32, 4 stages (32 KB), 4 blocks per SM; for grids of larger
// tiles that would leave SMs idle.
using Tile256 = mma::MmaTile<128, 256, 2, 4, 4, 1>;
using Tile128 = mma::MmaTile<128, 128, 2, 2, 4, 2>;
using Tile64 = mma::MmaTile<64, 64, 2, 2, 4, 4>;

using MmaKernel = void (*)(mma::MmaParams);

template <typename Tile, int DT>
MmaKernel kernel_for(bool a_k, bool b_k) {
  if (a_k && b_k) return &mma::gemm_mma_kernel<Tile, DT, true, true>;
  if (a_k) return &mma::gemm_mma_kernel<Tile, DT, true, false>;
  if (b_k) return &mma::gemm_mma_kernel<Tile, DT, false, true>;
  return &mma::gemm_mma_kernel<Tile, DT, false, false>;
}

template <typename Tile>
cudaError_t launch_tile(const MmaGemm& g, cudaStream_t stream) {
  const MmaKernel kernel =
      g.type == kMmaTf32       ? kernel_for<Tile, mma::kMmaTF32>(g.a_kcontig, g.b_kcontig)
      : g.type == kMmaBFloat16 ? kernel_for<Tile, mma::kMmaBF16>(g.a_kcontig, g.b_kcontig)
                               : kernel_for<Tile, mma::kMmaF16>(g.a_kcontig, g.b_kcontig);
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
  p.pairs = g.ldc % 2 == 0 && reinterpret_cast<uintptr_t>(g.c) % (2 * elem) == 0;
  const int64_t tiles = static_cast<int64_t>(p.tiles_m) * p.tiles_n;
  if (tiles > INT_MAX) return cudaErrorInvalidConfiguration;  // one tile per block, 1-D grid
  kernel<<<static_cast<unsigned int>(tiles), Tile::THREADS, Tile::SMEM_BYTES, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool mma_operand_ok(const void* data, int64_t ld, int64_t outer, int elem_bytes) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0 && (outer <= 1 || ld * elem_bytes % 16 == 0);
}

cudaError_t launch_mma(const MmaGemm& g, cudaStream_t stream) {
  if (g.M > INT_MAX || g.N > INT_MAX || g.K > INT_MAX) return cudaErrorInvalidValue;
  if (g.tile == 256) return launch_tile<Tile256>(g, stream);
  if (g.tile == 128) return launch_tile<Tile128>(g, stream);
  if (g.tile == 64) return launch_tile<Tile64>(g, stream);
  return cudaErrorInvalidValue;
}

cudaError_t mma_image_ptx(int* version) {
  *version = 0;
  cudaFuncAttributes attr{};
  const cudaError_t err =
      cudaFuncGetAttributes(&attr, &mma::gemm_mma_kernel<Tile128, mma::kMmaBF16, true, false>);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // no image for this device at all: report 0, no error
    return cudaSuccess;
  }
  if (err != cudaSuccess) return err;
  *version = attr.ptxVersion;
  return cudaSuccess;
}

}  // namespace lltm_ext::gemm
