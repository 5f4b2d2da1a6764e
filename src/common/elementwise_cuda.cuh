// Vectorized element-wise CUDA kernels shared by the unary ops: out[i] = op(in_0[i], ...).
//
// `op` is a functor whose operator() takes and returns opmath_t<T> (float for half types), e.g.
//   struct Relu { template <typename A> LLTM_EXT_HD A operator()(A x) const; };
// Ops that need exp, a reciprocal or rint take them from a `Math` policy: `Math` (or `FastMath`,
// for results rounded to half types; MathFor<T> picks) below on CUDA, cpu::elementwise::Math
// (elementwise_cpu.h) on the CPU. launch(stream, n, op, out, in_0, ...) checks nothing: the
// binding has validated the tensors (one device, dtype and element count, dense and laid out
// alike: the kernels run in memory order), allocated `out`, set the device and checks the returned
// error (common/elementwise_binding.h). Plain CUDA: no ATen (common/cuda_kernel.cuh says why).
//
// Two kernels for dense tensors, one picked per launch:
//  * vector_kernel, when every pointer is 16-byte aligned: 16-byte loads and stores (LDG.E.128,
//    STG.E.128), kPacksPerThread packs per input per thread, all loads issued before the first
//    use, math in opmath_t; block 0 also finishes the tail of less than one pack.
//  * scalar_kernel, any alignment (e.g. x[1:]): kScalarUnroll elements per thread, loads first.
// Both loop grid-stride with 64-bit indices, but the grid covers the whole tensor (one iteration
// per thread up to the grid limit of 2^31 - 1 blocks) and the block scheduler balances the SMs.
// One pack per thread over the whole tensor ran at PyTorch's speed; a grid sized to the GPU
// (every thread looping) and more packs per thread were slower: 2048 resident threads x 16 bytes
// per SM are enough bytes in flight (docs/kernel_notes.md has the measurements).
// And rows_kernel (launch_rows) for one input that is not dense, read in place as strided rows
// (common/strided_rows.h), the output contiguous: a copy first would read and write it once more.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "common/cuda_kernel.cuh"
#include "common/strided_rows.h"

namespace lltm_ext::cuda::elementwise {

constexpr int kThreads = 256;       // threads per block
constexpr int kMinBlocksPerSm = 4;  // register cap of 64 per thread (65536 / (4 * 256))
constexpr int kPackBytes = 16;      // one LDG.E.128 / STG.E.128
constexpr int kPacksPerThread = 1;  // per input per iteration (see the grid above)
constexpr int kScalarUnroll = 4;    // elements per input per thread per iteration (scalar path)
constexpr int64_t kMaxBlocks = 0x7fffffff;  // grid.x limit
constexpr int64_t kMaxGridY = 65535;        // grid.y limit

// CUDA's own exp, reciprocal and rint: expf is the accurate one (not __expf), 1 / x is IEEE
// division, rintf is one instruction.
struct Math {
  static __device__ __forceinline__ float exp(float x) { return expf(x); }
  static __device__ __forceinline__ double exp(double x) { return ::exp(x); }
  static __device__ __forceinline__ float reciprocal(float x) { return 1.0f / x; }
  static __device__ __forceinline__ double reciprocal(double x) { return 1.0 / x; }
  static __device__ __forceinline__ float rint(float x) { return rintf(x); }
  static __device__ __forceinline__ double rint(double x) { return ::rint(x); }
};

// Fast float exp and reciprocal (MUFU.EX2, MUFU.RCP: a few ulp), for results rounded to float16
// or bfloat16, whose 11 or 8 bits they do not change (but for rare ties): it keeps such kernels
// memory-bound (accurate expf and IEEE division made bfloat16 sigmoid compute-bound:
// docs/kernel_notes.md). exp(-inf) = 0, exp(+large) = inf, 1 / inf = 0; no double overloads.
struct FastMath {
  static __device__ __forceinline__ float exp(float x) { return __expf(x); }
  static __device__ __forceinline__ float reciprocal(float x) { return __fdividef(1.0f, x); }
  static __device__ __forceinline__ float rint(float x) { return rintf(x); }
};

// Math for results of type T: the accurate one for float32 and float64, FastMath for half types.
template <typename T>
using MathFor = std::conditional_t<std::is_same_v<T, opmath_t<T>>, Math, FastMath>;

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
  constexpr int U = kPacksPerThread;
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

// out = op(in) with `in` read as strided rows and `out` contiguous: blocks in y walk the rows
// (grid-stride), in x a row's columns, kScalarUnroll per thread, loads first.
template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    rows_kernel(const T* __restrict__ in, T* __restrict__ out,
                const ::lltm_ext::elementwise::StridedRows r, const Op op) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads * kScalarUnroll;
  for (int64_t row = blockIdx.y; row < r.rows; row += gridDim.y) {
    const T* src = in + row * r.row_stride;
    T* dst = out + row * r.cols;
    for (int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kScalarUnroll + threadIdx.x;
         first < r.cols; first += step) {
      T v[kScalarUnroll][1];
#pragma unroll
      for (int u = 0; u < kScalarUnroll; ++u) {
        const int64_t c = first + u * kThreads;
        if (c < r.cols) {
          v[u][0] = src[c * r.col_stride];
        }
      }
#pragma unroll
      for (int u = 0; u < kScalarUnroll; ++u) {
        const int64_t c = first + u * kThreads;
        if (c < r.cols) {
          dst[c] = apply(op, v[u]);
        }
      }
    }
  }
}

// Blocks of kThreads for `items` per-thread work items: the whole tensor at once (>= 1).
inline unsigned int blocks_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(blocks, kMaxBlocks)));
}

inline bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kPackBytes == 0;
}

// out[i] = op(in_0[i], ...) for i < n, on `stream` (the caller has made out's device current).
// Returns the launch's error (cudaSuccess when fine).
template <typename T, typename Op, typename... In>
cudaError_t launch(cudaStream_t stream, int64_t n, const Op& op, T* out, const In*... in) {
  constexpr int N = sizeof...(In);
  static_assert(N >= 1, "an element-wise op needs at least one input");
  static_assert((std::is_same_v<In, T> && ...), "inputs and output of one dtype");
  if (n == 0) {
    return cudaSuccess;
  }
  const Args<T, N> args{{in...}, out};
  bool all_aligned = aligned(args.out);
  for (int k = 0; k < N; ++k) {
    all_aligned = all_aligned && aligned(args.in[k]);
  }
  if (all_aligned) {
    const int64_t packs = n / Pack<T>::kSize;
    const unsigned int blocks = blocks_for((packs + kPacksPerThread - 1) / kPacksPerThread);
    vector_kernel<T, Op, N><<<blocks, kThreads, 0, stream>>>(args, n, op);
  } else {
    const unsigned int blocks = blocks_for((n + kScalarUnroll - 1) / kScalarUnroll);
    scalar_kernel<T, Op, N><<<blocks, kThreads, 0, stream>>>(args, n, op);
  }
  return cudaGetLastError();
}

// out = op(in) for `in` laid out as strided rows `r` (rows > 0) and a contiguous `out`, on
// `stream`. Returns the launch's error.
template <typename T, typename Op>
cudaError_t launch_rows(cudaStream_t stream, const ::lltm_ext::elementwise::StridedRows& r,
                        const Op& op, T* out, const T* in) {
  if (r.rows == 0 || r.cols == 0) {
    return cudaSuccess;
  }
  const dim3 blocks(blocks_for((r.cols + kScalarUnroll - 1) / kScalarUnroll),
                    static_cast<unsigned int>(std::min(r.rows, kMaxGridY)));
  rows_kernel<T, Op><<<blocks, kThreads, 0, stream>>>(in, out, r, op);
  return cudaGetLastError();
}

// y = op(x) for n elements: x dense (x_rows.rows 0, launch) or read as strided rows (launch_rows).
template <typename T, typename Op>
cudaError_t launch_unary(cudaStream_t stream, int64_t n,
                         const ::lltm_ext::elementwise::StridedRows& x_rows, const Op& op, T* y,
                         const T* x) {
  return x_rows.rows > 0 ? launch_rows(stream, x_rows, op, y, x) : launch(stream, n, op, y, x);
}

}  // namespace lltm_ext::cuda::elementwise
