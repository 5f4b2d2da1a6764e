// mma.sync on the tensor cores (sm_80 and newer), shared by the GEMM's mma kernel
// (gemm/tiles/kernel_sm80.cuh) and the LLTM sequence's cluster kernels: one 16 x 8 tile of float32
// accumulators += A B from register fragments, ldmatrix (the fragments from shared memory), and
// the rounding of float32 to tf32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lltm_ext::cuda {

// The fragments' element types: mma_16816's DT (A and B of one type, float32 accumulators).
inline constexpr int kMmaF16 = 0, kMmaBF16 = 1, kMmaTF32 = 2;  // TF32: float32 data

// d += a b on one 16 x 8 x 16 tile (A row-major, B column-major fragments), float32 accumulators;
// tf32: on one 16 x 8 x 8 tile. Lane l = 4 g + t holds (PTX ISA, mma.m16n8k8 / m16n8k16):
// tf32 a = {A[g][t], A[g + 8][t], A[g][t + 4], A[g + 8][t + 4]}, b = {B[t][g], B[t + 4][g]};
// every DT d = {D[g][2 t], D[g][2 t + 1], D[g + 8][2 t], D[g + 8][2 t + 1]}. A trap below sm_80.
template <int DT>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (DT == kMmaTF32) {  // one 16 x 8 x 8 tile: the fragments hold tf32 values
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (DT == kMmaBF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  __trap();
#endif
}

// Four 8 x 8 matrices of 16-bit elements from shared memory, one row address per lane (lanes
// 8j..8j+7 give matrix j's rows); TRANS: each matrix transposed on the way. A trap below sm_80.
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // "memory": ordered after the barrier or wait that publishes the data, like a plain shared load.
  if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  }
#else
  __trap();
#endif
}

// float32 bits rounded to tf32 (to nearest, ties away from zero, as cuBLAS rounds), as the mma
// reads them. The tensor core itself truncates (no rounding: faster, but well past torch.mm's TF32
// error); the integer form (add half a tf32 ulp, Inf / NaN left alone; CUTLASS's
// round_half_ulp_truncate) was slower than cvt.rna, so cvt.rna it is. Figures:
// docs/decisions.md#tf32-rounding.
__device__ __forceinline__ uint32_t to_tf32(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
#else
  __trap();
  return x;
#endif
}

}  // namespace lltm_ext::cuda
