// 4-element loads and stores of the tiled GEMM kernels, with conversion to and from the
// accumulator type: 16-byte (two for float64, 8 bytes for half types) accesses of global and
// shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lltm_ext::gemm_tiles {

template <typename To, typename From>
__device__ __forceinline__ To tile_cast(From x) {
  return static_cast<To>(x);
}

// Four consecutive elements at p (aligned to 4 * sizeof(T)), converted to Acc.
template <typename T, typename Acc>
__device__ __forceinline__ void load4_global(const T* p, Acc (&v)[4]) {
  if constexpr (sizeof(T) == 8) {
    const double2 lo = __ldg(reinterpret_cast<const double2*>(p));
    const double2 hi = __ldg(reinterpret_cast<const double2*>(p) + 1);
    v[0] = tile_cast<Acc>(lo.x), v[1] = tile_cast<Acc>(lo.y);
    v[2] = tile_cast<Acc>(hi.x), v[3] = tile_cast<Acc>(hi.y);
  } else if constexpr (sizeof(T) == 4) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = tile_cast<Acc>(x.x), v[1] = tile_cast<Acc>(x.y);
    v[2] = tile_cast<Acc>(x.z), v[3] = tile_cast<Acc>(x.w);
  } else {
    static_assert(sizeof(T) == 2, "float64, float32 or a 16-bit float");
    const uint2 bits = __ldg(reinterpret_cast<const uint2*>(p));
    T x[4];
    __builtin_memcpy(x, &bits, sizeof(bits));
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = tile_cast<Acc>(x[j]);
  }
}

// Four consecutive Acc values at p (16-byte aligned), unconverted, by plain vector loads (one
// 16-byte load, two for float64) through a generic pointer, so it serves both address spaces:
// shared memory (the operand fragments in mma_k_step.cuh) and global memory (the partial products
// of the split-K workspaces in split_k_reduce.cuh). Operands in global memory, of any T, are read
// by load4_global instead (read-only path, conversion to Acc).
template <typename Acc>
__device__ __forceinline__ void load_vec4(const Acc* p, Acc* v) {
  if constexpr (sizeof(Acc) == 8) {
    const double2 lo = reinterpret_cast<const double2*>(p)[0];
    const double2 hi = reinterpret_cast<const double2*>(p)[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
  } else {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  }
}

template <typename Acc>
__device__ __forceinline__ void store4_shared(Acc* p, const Acc (&v)[4]) {
  if constexpr (sizeof(Acc) == 8) {
    reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
    reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
  } else {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

// Four Acc values converted to OutT, stored at p (aligned to 4 * sizeof(OutT)).
template <typename OutT, typename Acc>
__device__ __forceinline__ void store4_global(OutT* p, const Acc* v) {
  if constexpr (sizeof(OutT) == 8) {
    reinterpret_cast<double2*>(p)[0] =
        make_double2(tile_cast<double>(v[0]), tile_cast<double>(v[1]));
    reinterpret_cast<double2*>(p)[1] =
        make_double2(tile_cast<double>(v[2]), tile_cast<double>(v[3]));
  } else if constexpr (sizeof(OutT) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(tile_cast<float>(v[0]), tile_cast<float>(v[1]),
                                                tile_cast<float>(v[2]), tile_cast<float>(v[3]));
  } else {
    OutT x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = tile_cast<OutT>(v[j]);
    uint2 bits;
    __builtin_memcpy(&bits, x, sizeof(bits));
    *reinterpret_cast<uint2*>(p) = bits;
  }
}

}  // namespace lltm_ext::gemm_tiles
