// Device-side loads shared by the sequence's step kernels (steps/steps.cu,
// cluster/cluster_kernels.cuh, wide/wide_kernels.cuh): four values from shared memory in
// 16-byte loads, and loads through L2 of data that another block of the same kernel wrote.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lltm_ext::lltm {

// Four consecutive values from 16-byte-aligned shared memory: one 16-byte load for float, two
// for double.
__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}
__device__ __forceinline__ void load4(const double* p, double (&v)[4]) {
  const double2 a = reinterpret_cast<const double2*>(p)[0];
  const double2 b = reinterpret_cast<const double2*>(p)[1];
  v[0] = a.x;
  v[1] = a.y;
  v[2] = b.x;
  v[3] = b.y;
}

// A load through L2 only (ld.global.cg), for data another block wrote earlier in the same kernel
// (L1 is not coherent across SMs: a plain load could hit a stale line).
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  if constexpr (sizeof(T) == 2) {  // c10::Half, c10::BFloat16: their bits
    const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(p));
    T value;
    __builtin_memcpy(&value, &bits, sizeof(T));
    return value;
  } else {
    return __ldcg(p);
  }
}

// Four consecutive elements at p through L2, converted to acc_t: one 16-byte load for float, two
// for double, one 8-byte load for the 16-bit types. p is aligned to four elements.
template <typename acc_t, typename T>
__device__ __forceinline__ void load4_cg(const T* p, acc_t (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    const float4 q = __ldcg(reinterpret_cast<const float4*>(p));
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else if constexpr (sizeof(T) == 8) {
    const double2 a = __ldcg(reinterpret_cast<const double2*>(p));
    const double2 b = __ldcg(reinterpret_cast<const double2*>(p) + 1);
    v[0] = a.x;
    v[1] = a.y;
    v[2] = b.x;
    v[3] = b.y;
  } else {
    const uint2 bits = __ldcg(reinterpret_cast<const uint2*>(p));
    T e[4];
    __builtin_memcpy(e, &bits, sizeof(bits));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = static_cast<acc_t>(e[i]);
    }
  }
}

}  // namespace lltm_ext::lltm
