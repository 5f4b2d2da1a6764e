// The autocast kernels' operand rounding in one launch: float32 tensors copied with each value
// rounded to float16 or bfloat16 (round to nearest even, as a cast to the half type rounds) and
// held in float32, for the float32 cell or sequence whose products then read what half products
// read.
#include <cstdint>

#include "lltm/lltm_launchers.h"

namespace lltm_ext::lltm {
namespace {

constexpr int kRoundThreads = 256;

template <typename H>
__device__ __forceinline__ float round_through(float x) {
  return static_cast<float>(static_cast<H>(x));
}

// Every segment in turn, each by the whole grid: 16-byte packs where both of its pointers are
// 16-byte aligned, then the elements past the last pack (all of them where one is not).
template <typename H>
__global__ void __launch_bounds__(kRoundThreads) round_through_kernel(RoundSegments segments) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int k = 0; k < segments.count; ++k) {
    const RoundSegment s = segments.segment[k];
    const bool packed =
        ((reinterpret_cast<uintptr_t>(s.src) | reinterpret_cast<uintptr_t>(s.dst)) % 16) == 0;
    const int64_t packs = packed ? s.n / 4 : 0;
    for (int64_t i = first; i < packs; i += stride) {
      float4 v = reinterpret_cast<const float4*>(s.src)[i];
      v.x = round_through<H>(v.x);
      v.y = round_through<H>(v.y);
      v.z = round_through<H>(v.z);
      v.w = round_through<H>(v.w);
      reinterpret_cast<float4*>(s.dst)[i] = v;
    }
    for (int64_t i = 4 * packs + first; i < s.n; i += stride) {
      s.dst[i] = round_through<H>(s.src[i]);
    }
  }
}

}  // namespace

template <typename H>
cudaError_t launch_round_through(const RoundSegments& segments, int sms, cudaStream_t stream) {
  int64_t most = 0;
  for (int k = 0; k < segments.count; ++k) {
    most = segments.segment[k].n > most ? segments.segment[k].n : most;
  }
  if (most == 0) {
    return cudaSuccess;
  }
  // A thread per pack of the largest segment, up to 16 blocks per SM (the grid strides past that).
  const int64_t wanted = (most / 4 + kRoundThreads) / kRoundThreads;
  const int64_t cap = 16 * static_cast<int64_t>(sms > 0 ? sms : 1);
  const int blocks = static_cast<int>(wanted < cap ? wanted : cap);
  round_through_kernel<H><<<blocks, kRoundThreads, 0, stream>>>(segments);
  return cudaGetLastError();
}

template cudaError_t launch_round_through<c10::Half>(const RoundSegments&, int, cudaStream_t);
template cudaError_t launch_round_through<c10::BFloat16>(const RoundSegments&, int, cudaStream_t);

}  // namespace lltm_ext::lltm
