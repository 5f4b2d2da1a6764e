// The sm_80+ tensor-core GEMM's launchers (gemm_launchers.h): the instantiations of
// gemm/tiles/kernel_sm80.cuh for 16-byte-aligned operands (bf16 / fp16 / tf32, the four operand
// major-ness pairs, block tiles 128 x 256, 128 x 128 and 64 x 64; gemm_mma_launch.cuh), the
// launch, and the query of the PTX version of the image the device loads.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "gemm/gemm_mma_launch.cuh"

namespace lltm_ext::gemm {
namespace {

namespace mma = lltm_ext::gemm_tiles::mma;
using mma_launch::Tile128;
using mma_launch::Tile256;
using mma_launch::Tile64;

}  // namespace

cudaError_t launch_mma(const MmaGemm& g, cudaStream_t stream) {
  if (g.M > INT_MAX || g.N > INT_MAX || g.K > INT_MAX) return cudaErrorInvalidValue;
  if (g.tile == 256) return mma_launch::launch_tile<Tile256, mma::kLoadChunks>(g, stream);
  if (g.tile == 128) return mma_launch::launch_tile<Tile128, mma::kLoadChunks>(g, stream);
  if (g.tile == 64) return mma_launch::launch_tile<Tile64, mma::kLoadChunks>(g, stream);
  return cudaErrorInvalidValue;
}

cudaError_t mma_image_ptx(int* version) {
  *version = 0;
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(
      &attr, &mma::gemm_mma_kernel<Tile128, mma::kMmaBF16, true, false, mma::kLoadChunks>);
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // no image for this device at all: report 0, no error
    return cudaSuccess;
  }
  if (err != cudaSuccess) return err;
  *version = attr.ptxVersion;
  return cudaSuccess;
}

}  // namespace lltm_ext::gemm
