// The recurrent product of the sequence's step kernels on the tensor cores (the cluster kernels,
// cluster/cluster_kernels.cuh, and the wide-state kernels, wide/wide_kernels.cuh): out[r][o] =
// sum_k x[r][k] w[o][k] for a block's 16 batch rows, as mma.sync m16n8k8 tiles with tf32 operands
// and float32 sums, the k steps of eight dealt to the block's kMmaWarps warps in turn; each warp's
// partial sums go to shared memory, and the gate math adds the warps' parts. One pass on operands
// rounded to tf32 (Product::kTf32), or three on float32 operands split into tf32 parts
// (Product::kTf32x3, sequence_launchers.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/macros.h"
#include "common/mma_sync.cuh"
#include "lltm_sequence/sequence_launchers.h"

namespace lltm_ext::lltm {

constexpr int kMmaRows = 16;  // the rows of an mma tile: a block's batch rows, at most 16
constexpr int kMmaWarps = 8;  // warps of the kernels that use it (256 threads)

// Row stride, in floats, of a warp's partial sums of n_out outputs ([kMmaWarps][kMmaRows][stride]):
// at least n_out rounded up to whole tiles of eight, and 8 mod 16 (mma_store's 8-byte stores of a
// half-warp then hit 32 distinct banks).
LLTM_EXT_HD int mma_sums_stride(int n_out) {
  return (n_out + 15) / 16 * 16 + 8;
}

// A value as the product reads it from shared memory: rounded to tf32 (to nearest, as cuBLAS
// rounds) for one tensor-core pass, else as it is (the SIMT cores; the three passes split it as
// they read it). Values of a half type are tf32 values already (tf32 has float16's 10 mantissa
// bits and float32's exponent range): their products are exact.
template <Product P, typename acc_t>
__device__ __forceinline__ acc_t product_operand(acc_t v) {
  if constexpr (P == Product::kTf32) {
    static_assert(std::is_same_v<acc_t, float>, "the tensor-core product takes float operands");
    return __uint_as_float(cuda::to_tf32(__float_as_uint(v)));
  } else {
    return v;
  }
}

// float32 bits rounded to tf32's 10 mantissa bits, to nearest, ties away from zero (cvt.rna's
// result for every finite value; Inf and NaN stay Inf and NaN, and only values within half a tf32
// ulp of FLT_MAX round to Inf): half an ulp added to the magnitude's bits, the low 13 cleared. Two
// integer instructions, where cvt.rna.tf32.f32 compiles to four on sm_90 (an Inf test and a
// select besides).
__device__ __forceinline__ uint32_t round_tf32(float v) {
  return (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
}

// 3xTF32's split of v in three instructions: v = big + small, big = round_tf32(v), small = v - big
// (exact in float32, at most half a tf32 ulp of v) as it is, whose bits past tf32's the tensor
// core drops: small x big then carries an error of at most 2^-21 |v| (2^-22 with small rounded to
// tf32 by cvt.rna, six more instructions a split), of either sign as small's is.
__device__ __forceinline__ void split_tf32_fast(float v, uint32_t& big, uint32_t& small) {
  big = round_tf32(v);
  small = __float_as_uint(v - __uint_as_float(big));
}

// Independent k steps that a warp runs at once as chains of mma (one chain's latency hidden
// behind the others'), in mma_accumulate's three passes and in the tiled kernels.
constexpr int kMmaChains = 4;

// An A fragment's values (x's rows) as the product takes them: kTf32x3 split into big and small
// (split_tf32_fast), one pass rounded to tf32 (round_tf32; small unused).
template <Product P>
__device__ __forceinline__ void mma_split_a(const float (&av)[4], uint32_t (&big)[4],
                                            uint32_t (&small)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if constexpr (P == Product::kTf32x3) {
      split_tf32_fast(av[e], big[e], small[e]);
    } else {
      big[e] = round_tf32(av[e]);
      small[e] = 0;
    }
  }
}

// One k step of mma_chains into step (summed from zero before it): kTf32x3 small x big, big x
// small, big x big; one pass big x b (b_small unused).
template <Product P>
__device__ __forceinline__ void mma_k_step(float (&step)[4], const uint32_t (&a_big)[4],
                                           const uint32_t (&a_small)[4], const uint32_t (&b_big)[2],
                                           const uint32_t (&b_small)[2]) {
  step[0] = step[1] = step[2] = step[3] = 0.0f;
  if constexpr (P == Product::kTf32x3) {
    cuda::mma_16816<cuda::kMmaTF32>(step, a_small, b_big);
    cuda::mma_16816<cuda::kMmaTF32>(step, a_big, b_small);
  }
  cuda::mma_16816<cuda::kMmaTF32>(step, a_big, b_big);
}

// acc += the kMmaChains chains' sums, added on the SIMT cores.
__device__ __forceinline__ void add_chains(float (&acc)[4], const float (&step)[kMmaChains][4]) {
  static_assert(kMmaChains == 4, "the sums below add four chains");
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    acc[e] += (step[0][e] + step[1][e]) + (step[2][e] + step[3][e]);
  }
}

// One n-tile's share of kMmaChains k steps: acc += sum over i of A_i B_i, where A_i is
// (a_big[i], a_small[i]) from mma_split_a<P> and B_i's fragment is {b0[i], b1[i]} (w's values at
// k + t and k + t + 4). Each k step is its own chain, summed from zero (kTf32x3: small x big, big x
// small, big x big, the small terms first; one pass: big x b), and the chains are added to acc on
// the SIMT cores: the tensor core truncates its float32 sums, which chained over every k step
// drift one way (below).
template <Product P>
__device__ __forceinline__ void mma_chains(float (&acc)[4], const uint32_t (&a_big)[kMmaChains][4],
                                           const uint32_t (&a_small)[kMmaChains][4],
                                           const float (&b0)[kMmaChains],
                                           const float (&b1)[kMmaChains]) {
  float step[kMmaChains][4];
#pragma unroll
  for (int i = 0; i < kMmaChains; ++i) {
    uint32_t b_big[2], b_small[2] = {0, 0};
    if constexpr (P == Product::kTf32x3) {
      split_tf32_fast(b0[i], b_big[0], b_small[0]);
      split_tf32_fast(b1[i], b_big[1], b_small[1]);
    } else {
      b_big[0] = __float_as_uint(b0[i]);
      b_big[1] = __float_as_uint(b1[i]);
    }
    mma_k_step<P>(step[i], a_big[i], a_small[i], b_big, b_small);
  }
  add_chains(acc, step);
}

// As mma_chains, with B's fragments split already (b_big, b_small from split_tf32_fast), for a
// warp that applies one B fragment to several A tiles.
template <Product P>
__device__ __forceinline__ void mma_chains_split(float (&acc)[4],
                                                 const uint32_t (&a_big)[kMmaChains][4],
                                                 const uint32_t (&a_small)[kMmaChains][4],
                                                 const uint32_t (&b_big)[kMmaChains][2],
                                                 const uint32_t (&b_small)[kMmaChains][2]) {
  float step[kMmaChains][4];
#pragma unroll
  for (int i = 0; i < kMmaChains; ++i) {
    mma_k_step<P>(step[i], a_big[i], a_small[i], b_big[i], b_small[i]);
  }
  add_chains(acc, step);
}

// acc[j] += this warp's share of x w^T for output tiles j0 + j (j < TILES, tiles of eight outputs
// below n_out): k steps of eight w, w + kMmaWarps, ... < ksteps (w: this warp). x: rows of
// stride xs, r < rows (rows past `rows` repeat row rows - 1: their sums are never read); w: n_out
// rows of stride ws (outputs past n_out repeat output n_out - 1, into sums that are never read).
// Both hold product_operand<P> values and zeros from K up to 8 ksteps, within their strides.
// kTf32x3: the sum of small x big, big x small and big x big (split_tf32_fast), the small terms
// first; the small x small term (~2^-22 of the product) is left out, as 3xTF32 does. Each k step's
// passes sum from zero and are added to acc on the SIMT cores: the tensor core truncates its
// float32 sums, and chained over every k step of a product (and then over the sequence's steps,
// through a cell state without a forget gate) that error drifts one way, well past cuBLAS's
// float32 error (measurements in docs/lltm_sequence_kernels.md). There a warp takes kMmaChains
// of its k steps at a time, as independent chains of mma (one chain's latency hidden behind the
// others'; k steps past ksteps read as zeros): float32 forward+backward faster on the wide and
// the cluster kernels. One pass chains every k step into acc, one k step at a time: the four
// chains, each summed from zero, were slower there (bfloat16, the wide kernels). Figures:
// docs/decisions_sequence.md#mma-chains.
// Fragments (common/mma_sync.cuh): lane 4 g + t reads x rows g, g + 8 and w rows (outputs) j * 8 +
// g at k + t and k + t + 4; with strides of 4 mod 32 the 32 lanes hit 32 banks.
template <int TILES, Product P = Product::kTf32>
__device__ __forceinline__ void mma_accumulate(float (&acc)[TILES][4], const float* x, int xs,
                                               int rows, const float* w, int ws, int j0, int n_out,
                                               int ksteps) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4, n_tiles = (n_out + 7) / 8;
  const float* xa = x + min(g, rows - 1) * xs + t;
  const float* xb = x + min(g + 8, rows - 1) * xs + t;
  int wj[TILES];
#pragma unroll
  for (int j = 0; j < TILES; ++j) {
    wj[j] = min((j0 + j) * 8 + g, n_out - 1) * ws + t;
  }
  if constexpr (P != Product::kTf32x3) {  // one pass: every k step chained into acc
    for (int ks = warp; ks < ksteps; ks += kMmaWarps) {
      const int k = ks * 8;
      const uint32_t a[4] = {__float_as_uint(xa[k]), __float_as_uint(xb[k]),
                             __float_as_uint(xa[k + 4]), __float_as_uint(xb[k + 4])};
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        if (j0 + j < n_tiles) {  // warp-uniform
          const uint32_t b[2] = {__float_as_uint(w[wj[j] + k]), __float_as_uint(w[wj[j] + k + 4])};
          cuda::mma_16816<cuda::kMmaTF32>(acc[j], a, b);
        }
      }
    }
  } else {
    for (int ks0 = warp; ks0 < ksteps; ks0 += kMmaChains * kMmaWarps) {
      uint32_t a_big[kMmaChains][4], a_small[kMmaChains][4];
      int k[kMmaChains];
      bool in[kMmaChains];
#pragma unroll
      for (int i = 0; i < kMmaChains; ++i) {
        in[i] = ks0 + i * kMmaWarps < ksteps;  // warp-uniform
        k[i] = (ks0 + i * kMmaWarps) * 8;
        const float av[4] = {in[i] ? xa[k[i]] : 0.0f, in[i] ? xb[k[i]] : 0.0f,
                             in[i] ? xa[k[i] + 4] : 0.0f, in[i] ? xb[k[i] + 4] : 0.0f};
        mma_split_a<P>(av, a_big[i], a_small[i]);
      }
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        if (j0 + j < n_tiles) {  // warp-uniform
          float b0[kMmaChains], b1[kMmaChains];
#pragma unroll
          for (int i = 0; i < kMmaChains; ++i) {
            b0[i] = in[i] ? w[wj[j] + k[i]] : 0.0f;
            b1[i] = in[i] ? w[wj[j] + k[i] + 4] : 0.0f;
          }
          mma_chains<P>(acc[j], a_big, a_small, b0, b1);
        }
      }
    }
  }
}

// This warp's partial sums of output tiles j0 + j (below n_out's tiles) to sums + (w * kMmaRows +
// r) * ps + o (w: this warp; ps = mma_sums_stride(n_out); 8-byte aligned sums). Lane 4 g + t holds
// rows g and g + 8, outputs 2 t and 2 t + 1 of each tile.
template <int TILES>
__device__ __forceinline__ void mma_store(const float (&acc)[TILES][4], float* sums, int ps, int j0,
                                          int n_out) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4, n_tiles = (n_out + 7) / 8;
  float* out = sums + warp * kMmaRows * ps + 2 * t;
#pragma unroll
  for (int j = 0; j < TILES; ++j) {
    if (j0 + j < n_tiles) {
      float* o = out + (j0 + j) * 8;
      *reinterpret_cast<float2*>(o + g * ps) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(o + (g + 8) * ps) = make_float2(acc[j][2], acc[j][3]);
    }
  }
}

// The sum of the kMmaWarps warps' parts of output o of row r (sums as mma_store wrote them).
__device__ __forceinline__ float mma_sum(const float* sums, int ps, int r, int o) {
  const float* p = sums + r * ps + o;
  float s = 0.0f;
#pragma unroll
  for (int w = 0; w < kMmaWarps; ++w) {
    s += p[w * kMmaRows * ps];
  }
  return s;
}

}  // namespace lltm_ext::lltm
