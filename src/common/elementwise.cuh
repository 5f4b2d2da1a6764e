// Vectorized element-wise CUDA kernels shared by the unary ops: out[i] = op(in_0[i], ...).
//
// `op` is a functor whose operator() takes and returns opmath_t<T> (float for half types), e.g.
//   struct Relu { template <typename A> LLTM_EXT_HD A operator()(A x) const; };
// Ops that need exp or rint take them from a `Math` policy: `Math` below on CUDA,
// cpu::elementwise::Math (elementwise_cpu.h) on the CPU. launch(out, op, in_0, ...) checks
// nothing: the binding has validated the tensors (one device, dtype and element count, contiguous)
// and allocated `out`.
//
// Two kernels, one picked per launch:
//  * vector_kernel, when every pointer is 16-byte aligned: each thread loads kUnroll<N> 16-byte
//    packs per input (all loads issued before the first use), computes in opmath_t and stores
//    16-byte packs, in a 64-bit grid-stride loop over chunks of kThreads * kUnroll<N> packs;
//    block 0 finishes the tail of less than one pack.
//  * scalar_kernel, any alignment (e.g. x[1:]): kScalarUnroll elements per thread per iteration.
// The grid is as many blocks as the GPU holds at once (occupancy x SMs, via grid_for), so that the
// grid-stride loop splits the work evenly, with no second wave.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "common/cuda_utils.cuh"
#include "common/dispatch.h"

namespace lltm_ext::cuda::elementwise {

constexpr int kThreads = 256;       // threads per block
constexpr int kMinBlocksPerSm = 4;  // register cap of 64 per thread (65536 / (4 * 256))
constexpr int kPackBytes = 16;
constexpr int kLoadBytes = 64;    // bytes each thread loads per iteration, all inputs together
constexpr int kScalarUnroll = 8;  // elements per input per thread per iteration (scalar path)

// 16-byte packs per input per thread per iteration: 4 for one input, 2 for two (more would spill
// at the 64-register cap; 64 bytes x 1024 threads is far more than an SM needs in flight).
template <int N>
constexpr int kUnroll = kLoadBytes / (kPackBytes * N) > 1 ? kLoadBytes / (kPackBytes * N) : 1;

// CUDA's own exp and rint (rintf is one instruction; expf is the accurate one, not __expf).
struct Math {
  static __device__ __forceinline__ float exp(float x) { return expf(x); }
  static __device__ __forceinline__ double exp(double x) { return ::exp(x); }
  static __device__ __forceinline__ float rint(float x) { return rintf(x); }
  static __device__ __forceinline__ double rint(double x) { return ::rint(x); }
};

// 16 bytes of T: 4 floats, 2 doubles, 8 halves or bfloat16s.
template <typename T>
struct alignas(kPackBytes) Pack {
  static constexpr int kSize = kPackBytes / static_cast<int>(sizeof(T));
  T v[kSize];
};

// Raw pointers of one launch: N inputs and the output, all of one dtype.
template <typename T, int N>
struct Args {
  const T* in[N];
  T* out;
};

// One 16-byte load through the read-only path (LDG.E.128.CONSTANT), one 16-byte store.
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  Pack<T> out;
  memcpy(&out, &raw, sizeof(raw));
  return out;
}

template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& value) {
  uint4 raw;
  memcpy(&raw, &value, sizeof(raw));
  *reinterpret_cast<uint4*>(p) = raw;
}

// op(in_0, ..., in_{N-1}) in opmath_t, rounded back to T.
template <typename T, typename Op, int N, size_t... I>
__device__ __forceinline__ T apply(const Op& op, const T (&x)[N], std::index_sequence<I...>) {
  return static_cast<T>(op(static_cast<opmath_t<T>>(x[I])...));
}

template <typename T, typename Op, int N>
__device__ __forceinline__ T apply(const Op& op, const T (&x)[N]) {
  return apply(op, x, std::make_index_sequence<N>{});
}

// Element i of every input -> element i of the output.
template <typename T, typename Op, int N>
__device__ __forceinline__ void apply_at(const Op& op, const Args<T, N>& args, int64_t i) {
  T x[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    x[k] = args.in[k][i];
  }
  args.out[i] = apply(op, x);
}

template <typename T, typename Op, int N>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    vector_kernel(const Args<T, N> args, const int64_t n, const Op op) {
  using P = Pack<T>;
  constexpr int W = P::kSize;
  constexpr int U = kUnroll<N>;
  const int64_t packs = n / W;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads * U;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * U + threadIdx.x; first < packs;
       first += step) {
    P v[U][N];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t p = first + u * kThreads;
      if (p < packs) {
#pragma unroll
        for (int k = 0; k < N; ++k) {
          v[u][k] = load_pack(args.in[k] + p * W);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t p = first + u * kThreads;
      if (p < packs) {
        P out;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          T x[N];
#pragma unroll
          for (int k = 0; k < N; ++k) {
            x[k] = v[u][k].v[j];
          }
          out.v[j] = apply(op, x);
        }
        store_pack(args.out + p * W, out);
      }
    }
  }
  // The last n % W elements (fewer than one pack).
  const int64_t tail = packs * W + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) {
    apply_at(op, args, tail);
  }
}

template <typename T, typename Op, int N>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    scalar_kernel(const Args<T, N> args, const int64_t n, const Op op) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads * kScalarUnroll;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kScalarUnroll + threadIdx.x;
       first < n; first += step) {
    T v[kScalarUnroll][N];
#pragma unroll
    for (int u = 0; u < kScalarUnroll; ++u) {
      const int64_t i = first + u * kThreads;
      if (i < n) {
#pragma unroll
        for (int k = 0; k < N; ++k) {
          v[u][k] = args.in[k][i];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kScalarUnroll; ++u) {
      const int64_t i = first + u * kThreads;
      if (i < n) {
        args.out[i] = apply(op, v[u]);
      }
    }
  }
}

struct VectorPath {};
struct ScalarPath {};

// Blocks of `kernel` resident on one SM of `device` at once, read once per kernel and device.
// `Path` tells apart the two kernels of one (T, Op, N), whose pointer types are the same.
template <typename Path, typename Kernel>
int resident_blocks(Kernel kernel, int device) {
  static int cache[64] = {0};
  int* slot = (device >= 0 && device < 64) ? &cache[device] : nullptr;
  if (slot != nullptr && *slot > 0) {
    return *slot;
  }
  int blocks = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, 0));
  blocks = blocks > 0 ? blocks : 1;
  if (slot != nullptr) {
    *slot = blocks;
  }
  return blocks;
}

inline bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kPackBytes == 0;
}

// out = op(inputs...) element-wise on the current stream of out's device. Every tensor: contiguous,
// out's dtype, device and element count (checked by the caller). (The bindings have checked the
// dtype: the dispatch's error for other dtypes is never reached.)
template <typename Op, typename... Inputs>
void launch(const at::Tensor& out, const Op& op, const Inputs&... inputs) {
  constexpr int N = sizeof...(Inputs);
  static_assert(N >= 1, "an element-wise op needs at least one input");
  const int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  const c10::cuda::CUDAGuard guard(out.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int device = out.get_device();
  LLTM_EXT_DISPATCH_FLOATING(out.scalar_type(), "lltm_ext_elementwise", [&] {
    const Args<scalar_t, N> args{{inputs.template const_data_ptr<scalar_t>()...},
                                 out.template mutable_data_ptr<scalar_t>()};
    bool all_aligned = aligned(args.out);
    for (int k = 0; k < N; ++k) {
      all_aligned = all_aligned && aligned(args.in[k]);
    }
    if (all_aligned) {
      const auto kernel = vector_kernel<scalar_t, Op, N>;
      const int64_t packs = n / Pack<scalar_t>::kSize;
      const unsigned int blocks = grid_for((packs + kUnroll<N> - 1) / kUnroll<N>, kThreads, device,
                                           resident_blocks<VectorPath>(kernel, device));
      kernel<<<blocks, kThreads, 0, stream>>>(args, n, op);
    } else {
      const auto kernel = scalar_kernel<scalar_t, Op, N>;
      const unsigned int blocks = grid_for((n + kScalarUnroll - 1) / kScalarUnroll, kThreads,
                                           device, resident_blocks<ScalarPath>(kernel, device));
      kernel<<<blocks, kThreads, 0, stream>>>(args, n, op);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace lltm_ext::cuda::elementwise
