// cp.async, the asynchronous global -> shared copy (sm_80 and newer) of the multistage GEMM
// kernel: the copy instructions, their commit and wait, and LLTM_EXT_NO_CP_ASYNC, which
// marks device code for older architectures (where these compile to nothing).
#pragma once

#include <cuda_runtime.h>

// cp.async, which the multistage kernel's copies use, exists from sm_80 (Ampere) on. In device code
// for older architectures (Volta, Turing) gemm_async_kernel compiles to a trap and the cp.async
// helpers to nothing: the host never launches that kernel there, because it checks at run time
// which PTX version the loaded image of the kernel was compiled from (gemm_cuda_host.cpp,
// async_image_ptx()), and runs the register-staged kernel instead.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define LLTM_EXT_NO_CP_ASYNC 1
#endif

#include <cstdint>

namespace lltm_ext::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Async copy of BYTES (4, 8 or 16) from global src to shared dst, of which only the first
// src_bytes are read and the rest zero-filled (src_bytes 0: src is not read, but must still be a
// mapped address).
template <int BYTES>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, int src_bytes) {
#ifndef LLTM_EXT_NO_CP_ASYNC
  if constexpr (BYTES == 16) {  // .cg: through L2 only
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
  } else {  // .ca: also through L1, where the neighbouring elements of the row are reused
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES),
                 "r"(src_bytes));
  }
#endif
}

template <int BYTES>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src) {
#ifndef LLTM_EXT_NO_CP_ASYNC
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(BYTES));
  }
#endif
}

// An L2 cache policy under which the lines a load brings into L2 are the first it evicts: for an
// operand streamed past the other (a weight past a few rows of activations), whose lines then
// replace each other instead of what else L2 holds, dirty lines included, which would otherwise
// be written back while the kernel reads.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy = 0;
#ifndef LLTM_EXT_NO_CP_ASYNC
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

// cp_async<16> under an L2 cache policy (l2_evict_first_policy).
__device__ __forceinline__ void cp_async_16_hint(uint32_t dst, const void* src, int src_bytes,
                                                 uint64_t policy) {
#ifndef LLTM_EXT_NO_CP_ASYNC
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
               "l"(src), "r"(src_bytes), "l"(policy));
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifndef LLTM_EXT_NO_CP_ASYNC
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
#ifndef LLTM_EXT_NO_CP_ASYNC
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
#endif
}

}  // namespace lltm_ext::cuda
