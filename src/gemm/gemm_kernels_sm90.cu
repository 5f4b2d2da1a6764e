// The Hopper tensor-core GEMM's launchers (gemm_launchers.h): its TMA tensor maps, encoded through
// the driver entry point fetched at run time (the module links no libcuda), the persistent grid,
// the image query; and the instantiations of gemm/tiles/kernel_sm90.cuh (bf16 / fp16 with the four
// operand major-ness pairs, tf32 K-major; block tiles 128 x 256, 128 x 128 and 128 x 64, and the
// narrow 128 x 16 for bf16 / fp16 with B K-major; the other widths: gemm_kernels_sm90_wide.cu); the
// float32 transpose that makes tf32's K-major operand copies (gemm/tiles/transpose_f32.cuh) and the
// row copies that make the others (gemm/tiles/copy_rows.cuh).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "common/cuda_kernel.cuh"
#include "gemm/gemm_launchers.h"
#include "gemm/tiles/copy_rows.cuh"
#include "gemm/tiles/kernel_sm90.cuh"
#include "gemm/tiles/transpose_f32.cuh"

namespace lltm_ext::gemm {
namespace {

namespace sm90 = lltm_ext::gemm_tiles::sm90;

// cuTensorMapEncodeTiled's signature (CUDA 12.0), called through the pointer the runtime gives.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled, looked up once (nullptr when the driver has none).
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                             cudaEnableDefault, &found);
#else
    const cudaError_t err =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess) (void)cudaGetLastError();  // leave no sticky-looking error behind
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<EncodeTiled>(p)
               : nullptr;
  }();
  return fn;
}

// A 2-D map of a matrix of `type`: `inner` unit-stride elements per row, `outer` rows `ld`
// elements apart; boxes of 128 bytes (the swizzle width) x box_outer elements, 128-byte swizzled.
// tf32 operands load as TFLOAT32 (rounded from float32 by the copy engine); `out`: the map of C,
// written as plain float32.
cudaError_t make_map(EncodeTiled encode, CUtensorMap* map, const void* data, Sm90Type type,
                     int64_t inner, int64_t outer, int64_t ld, uint32_t box_outer,
                     const char** step, bool out = false) {
  const bool f32 = type == kSm90Tf32 || type == kSm90F32x3;
  const int elem = f32 ? 4 : 2;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  // One row only: its stride is never followed; any multiple of 16 bytes is valid.
  const int64_t per16 = 16 / elem;
  const int64_t stride = outer > 1 ? ld : (inner + per16 - 1) / per16 * per16;
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride) * elem};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem), box_outer};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUtensorMapDataType dtype =
      f32 ? (out ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_TFLOAT32)
      : type == kSm90BFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                              : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode(map, dtype, 2, const_cast<void*>(data), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    static thread_local char why[256];
    std::snprintf(why, sizeof(why),
                  "cuTensorMapEncodeTiled (CUresult %d; address %p, dims %lld x %lld, stride %lld "
                  "bytes, box %u x %u)",
                  static_cast<int>(r), data, static_cast<long long>(inner),
                  static_cast<long long>(outer), static_cast<long long>(stride * elem),
                  static_cast<unsigned>(box[0]), box_outer);
    *step = why;
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

using Sm90Kernel = sm90::Sm90KernelFn;

// *count: the clusters of `blocks` blocks of the wgmma kernel (384 threads, `smem` bytes each)
// that run at once on the current device; read once per device (every instantiation takes a whole
// SM's shared memory, so one answer serves them all).
cudaError_t max_active_clusters(Sm90Kernel kernel, int blocks, int smem, int* count) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // 0: not read yet
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < kMaxDevices && (*count = known[device].load(std::memory_order_relaxed)) > 0) {
    return cudaSuccess;
  }
  err = cuda::max_active_clusters(kernel, static_cast<unsigned int>(blocks),
                                  dim3(sm90::Sm90Tile<128, sm90::kSm90BF16>::THREADS),
                                  static_cast<size_t>(smem), count);
  if (err == cudaSuccess && device < kMaxDevices) known[device].store(*count);
  return err;
}

template <int BN, int DT>
Sm90Kernel kernel_for(bool a_k, bool b_k) {
  if constexpr (DT == sm90::kSm90TF32) {
    // tf32 wgmma reads K-major operands only: no kernel for the other layouts (the caller copies).
    return a_k && b_k ? &sm90::gemm_sm90_kernel<BN, DT, true, true> : nullptr;
  } else {
    if (a_k && b_k) return &sm90::gemm_sm90_kernel<BN, DT, true, true>;
    if (a_k) return &sm90::gemm_sm90_kernel<BN, DT, true, false>;
    if (b_k) return &sm90::gemm_sm90_kernel<BN, DT, false, true>;
    return &sm90::gemm_sm90_kernel<BN, DT, false, false>;
  }
}

// The narrow tiles' kernels, BN 16 or 32: 16-bit, B K-major (nullptr otherwise).
template <int BN, int DT>
Sm90Kernel narrow_kernel_for(bool a_k, bool b_k) {
  if (!b_k) return nullptr;
  return a_k ? &sm90::gemm_sm90_kernel<BN, DT, true, true>
             : &sm90::gemm_sm90_kernel<BN, DT, false, true>;
}

template <int BN>
Sm90Kernel narrow_kernel_for_type(Sm90Type type, bool a_k, bool b_k) {
  if (type == kSm90Tf32 || type == kSm90F32x3) return nullptr;
  return type == kSm90BFloat16 ? narrow_kernel_for<BN, sm90::kSm90BF16>(a_k, b_k)
                               : narrow_kernel_for<BN, sm90::kSm90F16>(a_k, b_k);
}

template <int BN>
Sm90Kernel kernel_for_type(Sm90Type type, bool a_k, bool b_k) {
  if (type == kSm90F32x3) {
    if constexpr (BN == 64 || BN == 128) {
      return a_k && b_k ? &sm90::gemm_sm90_kernel<BN, sm90::kSm90F32X3, true, true> : nullptr;
    }
    return nullptr;
  }
  if (type == kSm90Tf32) return kernel_for<BN, sm90::kSm90TF32>(a_k, b_k);
  if (type == kSm90BFloat16) return kernel_for<BN, sm90::kSm90BF16>(a_k, b_k);
  return kernel_for<BN, sm90::kSm90F16>(a_k, b_k);
}

// Stream-K's auto rule (sm90_stream_k; docs/decisions.md#stream-k): the largest share of the SMs
// that the last round may fill, and the least K (16-bit; TF32's counts twice, its steps taking
// twice as long) times the share it leaves idle: what Stream-K saves, against its fixed cost (a
// second launch, a float32 partial tile written and read per block).
constexpr double kStreamKTail = 0.8;
constexpr double kStreamKMinIdleK = 2000;

}  // namespace

Sm90StreamK sm90_stream_k(const Sm90Gemm& g) {
  Sm90StreamK sk;
  const int64_t tiles = (g.M + 127) / 128 * ((g.N + 255) / 256);
  sk.dp_tiles = tiles;
  const bool f32 = g.type == kSm90Tf32 || g.type == kSm90F32x3;
  if (g.stream_k == kStreamKOff || g.bn != 256 || g.bm != 128 || g.type == kSm90F32x3 ||
      g.splits > 1 || g.c_trans || g.cluster_m == 2 || g.rows64 || (g.short_a && g.M <= 64) ||
      g.M <= 0 || g.N <= 0 || g.K <= 0 || g.sms <= 0) {
    return sk;
  }
  const int64_t steps = (g.K + (f32 ? 31 : 63)) / (f32 ? 32 : 64);
  const int64_t rem = tiles % g.sms;
  if (g.stream_k == kStreamKOn) {
    sk.sk_tiles = tiles < g.sms ? tiles : rem > 0 ? rem : g.sms;
  } else if (tiles > g.sms && rem > 0) {
    const double fill = static_cast<double>(rem) / g.sms;
    if (fill <= kStreamKTail &&
        (1 - fill) * static_cast<double>(g.K) * (f32 ? 2 : 1) >= kStreamKMinIdleK) {
      sk.sk_tiles = rem;
    }
  }
  // Its steps counted in int by the kernel.
  if (sk.sk_tiles * steps >= (int64_t{1} << 31)) sk.sk_tiles = 0;
  if (sk.sk_tiles == 0) return sk;
  sk.dp_tiles = tiles - sk.sk_tiles;
  sk.blocks = std::min<int64_t>(g.sms, sk.sk_tiles * steps);
  return sk;
}

cudaError_t launch_sm90(const Sm90Gemm& g, cudaStream_t stream, const char** step) {
  const int BM = g.bm;
  const int dt = g.type == kSm90F32x3      ? sm90::kSm90F32X3
                 : g.type == kSm90Tf32     ? sm90::kSm90TF32
                 : g.type == kSm90BFloat16 ? sm90::kSm90BF16
                                           : sm90::kSm90F16;
  const bool x3 = g.type == kSm90F32x3;
  // C (M x N, row-major): stored by TMA in 64 x 64 boxes where its base and stride allow, a
  // 16-bit C transposed (N x M, row-major) too, by kernels of its own (trans_kernel: 128-row
  // tiles, A K-major, B N-major); the narrow tile and the rest directly.
  const int elem = g.type == kSm90Tf32 || x3 ? 4 : 2;
  bool tma_store = g.bn >= 64 && (g.c_trans ? elem == 2 && rows_aligned(g.c, g.ldc, g.N, 2, 16)
                                            : rows_aligned(g.c, g.ldc, g.M, elem, 16));
  Sm90Kernel kernel;
  int smem = 0;
  if (g.bm != 128) {
    kernel =
        g.bm == 256 && !x3 ? sm90::tall_kernel(g.bn, dt, g.a_kcontig, g.b_kcontig, &smem) : nullptr;
  } else if (g.bn == 256) {
    kernel = kernel_for_type<256>(g.type, g.a_kcontig, g.b_kcontig);
    smem = sm90::sm90_smem_bytes<256>(dt);
  } else if (g.bn == 128) {
    kernel = kernel_for_type<128>(g.type, g.a_kcontig, g.b_kcontig);
    smem = sm90::sm90_smem_bytes<128>(dt);
  } else if (g.bn == 64) {
    kernel = kernel_for_type<64>(g.type, g.a_kcontig, g.b_kcontig);
    smem = sm90::sm90_smem_bytes<64>(dt);
  } else if (g.bn == 16) {
    kernel = narrow_kernel_for_type<16>(g.type, g.a_kcontig, g.b_kcontig);
    smem = sm90::sm90_smem_bytes<16>(dt);
  } else if (g.bn == 32) {
    kernel = narrow_kernel_for_type<32>(g.type, g.a_kcontig, g.b_kcontig);
    smem = sm90::sm90_smem_bytes<32>(dt);
  } else {
    kernel = x3 ? nullptr : sm90::wide_kernel(g.bn, dt, g.a_kcontig, g.b_kcontig, &smem);
  }
  *step =
      "choosing the kernel (tf32 needs K-major operands, float32 in three passes also a tile 64 "
      "or 128 wide; the narrow tile 16-bit ones, B K-major; tiles not a multiple of 64 wide, "
      "such as 168, a K-major B; 256-row tiles 16-bit ones, 152 wide, B K-major)";
  if (kernel == nullptr) return cudaErrorInvalidValue;
  if (g.c_trans && tma_store) {
    int trans_smem = 0;
    const Sm90Kernel trans =
        g.bm == 128 ? sm90::trans_kernel(g.bn, dt, g.a_kcontig, g.b_kcontig, &trans_smem) : nullptr;
    if (trans != nullptr) {
      kernel = trans;
      smem = trans_smem;
    } else {
      tma_store = false;
    }
  }
  // First a runtime call on the kernel: it also makes the device's primary context current on
  // this thread (a thread such as autograd's may have none yet), which the driver's encoder needs.
  *step = "cudaFuncSetAttribute";
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  *step = "looking up cuTensorMapEncodeTiled";
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  // A (M x K): K-major rows of K, else M-major rows of M; boxes of 64 K x BM M, resp. 64 M x
  // 64 K. B (K x N): K-major rows of K, else N-major rows of N; 64 K x BN, resp. 64 N x 64 K.
  // With M <= 64 (g.short_a), or in tiles of 64 rows (g.rows64), A's K-major boxes are 64 rows
  // deep, and one M-major box is loaded.
  const int a_rows = BM == 128 && ((g.short_a && g.M <= 64) || g.rows64) ? 64 : BM;
  const int64_t tiles_m = (g.M + a_rows - 1) / a_rows;
  // Clusters of two share B's stages (each block loads half of them: of a K-major B, a box of
  // Sm90Tile::B_HALF rows; of an N-major one, every other 64-column atom).
  int cm = !x3 && g.cluster_m == 2 && g.bn >= 64 && (g.bn % 64 == 0 || g.b_kcontig) && tiles_m >= 2
               ? 2
               : 1;
  // Persistent: a block per SM, or a cluster per pair of SMs that hold one at once (none there,
  // on a GPU without room for a pair: blocks alone).
  int64_t slots = g.sms;
  if (cm > 1) {
    int clusters = 0;
    *step = "cudaOccupancyMaxActiveClusters";
    err = max_active_clusters(kernel, cm, smem, &clusters);
    if (err != cudaSuccess) return err;
    if (clusters > 0) {
      slots = clusters;
    } else {
      cm = 1;
    }
  }
  // Float32 in three passes: each split copy's rows are its big parts, then its small parts.
  const int64_t parts = x3 ? 2 : 1;
  CUtensorMap map_a, map_b;
  err = g.a_kcontig ? make_map(encode, &map_a, g.a, g.type, g.K, parts * g.M, g.lda, a_rows, step)
                    : make_map(encode, &map_a, g.a, g.type, g.M, g.K, g.lda, 64, step);
  if (err != cudaSuccess) return err;
  const int b_rows = cm > 1 ? (g.bn / 2 + 7) / 8 * 8 : g.bn;  // in pairs, Sm90Tile::B_HALF
  err = g.b_kcontig ? make_map(encode, &map_b, g.b, g.type, g.K, parts * g.N, g.ldb, b_rows, step)
                    : make_map(encode, &map_b, g.b, g.type, g.N, g.K, g.ldb, 64, step);
  if (err != cudaSuccess) return err;
  CUtensorMap map_c = map_a;  // (unused when tma_store is false)
  if (tma_store) {
    err = g.c_trans
              ? make_map(encode, &map_c, g.c, g.type, g.M, g.N, g.ldc, 64, step, /*out=*/true)
              : make_map(encode, &map_c, g.c, g.type, g.N, g.M, g.ldc, 64, step, /*out=*/true);
    if (err != cudaSuccess) return err;
  }
  sm90::Sm90Params p;
  p.c = g.c;
  p.M = static_cast<int>(g.M);
  p.N = static_cast<int>(g.N);
  p.K = static_cast<int>(g.K);
  p.ldc = g.ldc;
  p.tma_store = tma_store;
  p.pairs = g.ldc % 2 == 0 && reinterpret_cast<uintptr_t>(g.c) % (2 * elem) == 0;
  p.overlap = g.overlap;
  p.group = g.group;
  p.a_rows = a_rows;
  p.c_trans = g.c_trans;
  p.cluster_m = cm;
  if (x3) {
    p.a_small = static_cast<int>(g.M);
    p.b_small = static_cast<int>(g.N);
    p.a = g.exact_a;
    p.b = g.exact_b;
    p.a_rs = g.a_rs, p.a_ks = g.a_ks, p.b_ks = g.b_ks, p.b_cs = g.b_cs;
  }
  p.tiles_m = static_cast<int>(tiles_m);
  p.tiles_n = static_cast<int>((g.N + g.bn - 1) / g.bn);
  // B (a weight past the activations' rows) streams through L2 as evict-first where at most 16
  // tile rows read it (M <= 2048; more were not measured), and A where one tile column reads it,
  // each up to l2_stream_limit's bytes (docs/decisions.md#l2-stream).
  if (!x3) {
    constexpr int64_t kStreamTileRows = 16;
    int device = 0;
    *step = "cudaGetDevice";
    err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const int64_t limit = l2_stream_limit(device);
    p.stream_a = p.tiles_n == 1 && g.M * g.K * elem <= limit;
    p.stream_b = p.tiles_m <= kStreamTileRows && g.K * g.N * elem <= limit;
  }
  if (g.splits > 1) {
    // K steps of 128 bytes: 64 16-bit elements, 32 tf32 ones; every split at least one step.
    const int64_t bk = 128 / elem;
    *step = "checking the K splits (k_split a multiple of 64, splits = ceil(K / k_split))";
    if (g.k_split <= 0 || g.k_split % 64 != 0 || g.partial == nullptr ||
        (g.K + g.k_split - 1) / g.k_split != g.splits) {
      return cudaErrorInvalidValue;
    }
    p.splits = g.splits;
    p.k_tiles_split = static_cast<int>(g.k_split / bk);
    p.partial = g.partial;
  }
  // Stream-K over the last, partial round: the whole rounds here, the rest by the SK kernel.
  const Sm90StreamK sk = cm == 1 ? sm90_stream_k(g) : Sm90StreamK{};
  Sm90Kernel sk_kernel = nullptr;
  if (sk.sk_tiles > 0) {
    *step = "setting up Stream-K (its kernel, its workspace)";
    sk_kernel = sm90::stream_k_kernel(dt, g.a_kcontig, g.b_kcontig);
    if (sk_kernel == nullptr || g.sk_space == nullptr || a_rows != BM) return cudaErrorInvalidValue;
    err = cudaFuncSetAttribute(sk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    p.sk_flags = reinterpret_cast<int*>(g.sk_space);
    p.sk_partial = g.sk_space + sk.flag_floats();
    p.sk_blocks = static_cast<int>(sk.blocks);
    p.items_run = static_cast<int>(sk.dp_tiles);
  }
  const dim3 threads(sm90::Sm90Tile<128, sm90::kSm90BF16>::THREADS);
  // At most one block (cluster) per work item.
  const int64_t items =
      sk.sk_tiles > 0 ? sk.dp_tiles : (tiles_m + cm - 1) / cm * p.tiles_n * p.splits;
  if (items > 0) {
    const unsigned int blocks = static_cast<unsigned int>(std::min<int64_t>(items, slots) * cm);
    *step = "the kernel launch";
    err = cuda::launch_dependent_clusters(true, static_cast<unsigned int>(cm), kernel, dim3(blocks),
                                          threads, static_cast<size_t>(smem), stream, map_a, map_b,
                                          map_c, p);
    if (err != cudaSuccess || sk.sk_tiles == 0) return err;
  } else {
    // No whole rounds (Stream-K forced on a grid of fewer tiles than SMs): the flags zeroed here.
    *step = "zeroing Stream-K's flags";
    err = cudaMemsetAsync(p.sk_flags, 0, sk.blocks * sizeof(int), stream);
    if (err != cudaSuccess) return err;
  }
  p.sk_first = static_cast<int>(sk.dp_tiles);
  *step = "the Stream-K kernel launch";
  return cuda::launch_dependent_clusters(items > 0, 1, sk_kernel, dim3(sk.blocks), threads,
                                         static_cast<size_t>(smem), stream, map_a, map_b, map_c, p);
}

cudaError_t launch_transpose_f32(const float* in, float* out, int64_t R, int64_t C, int64_t ld_in,
                                 int64_t ld_out, bool vec, int sms, cudaStream_t stream) {
  namespace tiles = lltm_ext::gemm_tiles;
  const int64_t tiles_r = (R + tiles::kTransposeTile - 1) / tiles::kTransposeTile;
  const int64_t count = (C + tiles::kTransposeTile - 1) / tiles::kTransposeTile * tiles_r;
  const unsigned int blocks =
      static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(count, 16LL * sms)));
  if (vec) {
    tiles::transpose_f32_kernel<true><<<blocks, tiles::kTransposeThreads, 0, stream>>>(
        in, out, R, C, ld_in, ld_out, tiles_r, count);
  } else {
    tiles::transpose_f32_kernel<false><<<blocks, tiles::kTransposeThreads, 0, stream>>>(
        in, out, R, C, ld_in, ld_out, tiles_r, count);
  }
  return cudaGetLastError();
}

cudaError_t launch_split_tf32(const float* in, float* out, int64_t R, int64_t C, int64_t ld_in,
                              int64_t ld_out, bool transposed, bool vec, int sms,
                              cudaStream_t stream) {
  namespace tiles = lltm_ext::gemm_tiles;
  if (transposed) {
    const int64_t tiles_r = (R + tiles::kTransposeTile - 1) / tiles::kTransposeTile;
    const int64_t count = (C + tiles::kTransposeTile - 1) / tiles::kTransposeTile * tiles_r;
    const unsigned int blocks =
        static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(count, 16LL * sms)));
    if (vec) {
      tiles::transpose_f32_kernel<true, true><<<blocks, tiles::kTransposeThreads, 0, stream>>>(
          in, out, R, C, ld_in, ld_out, tiles_r, count);
    } else {
      tiles::transpose_f32_kernel<false, true><<<blocks, tiles::kTransposeThreads, 0, stream>>>(
          in, out, R, C, ld_in, ld_out, tiles_r, count);
    }
    return cudaGetLastError();
  }
  const int64_t runs = R * ((C + 3) / 4);
  const unsigned int blocks = static_cast<unsigned int>(std::max<int64_t>(
      1, std::min<int64_t>((runs + tiles::kSplitThreads - 1) / tiles::kSplitThreads, 16LL * sms)));
  if (vec) {
    tiles::split_rows_tf32_kernel<true>
        <<<blocks, tiles::kSplitThreads, 0, stream>>>(in, out, R, C, ld_in, ld_out);
  } else {
    tiles::split_rows_tf32_kernel<false>
        <<<blocks, tiles::kSplitThreads, 0, stream>>>(in, out, R, C, ld_in, ld_out);
  }
  return cudaGetLastError();
}

cudaError_t launch_copy_rows(const void* src, void* dst, int64_t rows, int64_t row_bytes,
                             int64_t src_pitch, int64_t dst_pitch, cudaStream_t stream) {
  namespace tiles = lltm_ext::gemm_tiles;
  if (rows <= 0 || row_bytes <= 0) return cudaSuccess;
  const auto at = [&](int bytes) {
    return reinterpret_cast<uintptr_t>(src) % bytes == 0 && row_bytes % bytes == 0 &&
           (rows == 1 || src_pitch % bytes == 0);
  };
  // Threads per row: a power of two covering the row's 16-byte chunks, at most a block.
  const int64_t chunks = (row_bytes + 15) / 16;
  int lanes_log2 = 0;
  while (lanes_log2 < 8 && (int64_t{1} << lanes_log2) < chunks) ++lanes_log2;
  const int64_t lanes = int64_t{1} << lanes_log2;
  const int64_t rows_per_block = tiles::kCopyRowsThreads / lanes;
  const dim3 grid(static_cast<unsigned int>((chunks + lanes - 1) / lanes),
                  static_cast<unsigned int>(
                      std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, 65535)));
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst);
  if (at(16)) {
    tiles::copy_rows_kernel<16><<<grid, tiles::kCopyRowsThreads, 0, stream>>>(
        in, out, rows, row_bytes, src_pitch, dst_pitch, lanes_log2);
  } else if (at(4)) {
    tiles::copy_rows_kernel<4><<<grid, tiles::kCopyRowsThreads, 0, stream>>>(
        in, out, rows, row_bytes, src_pitch, dst_pitch, lanes_log2);
  } else {
    tiles::copy_rows_kernel<2><<<grid, tiles::kCopyRowsThreads, 0, stream>>>(
        in, out, rows, row_bytes, src_pitch, dst_pitch, lanes_log2);
  }
  return cudaGetLastError();
}

cudaError_t sm90_image_loaded(bool* loaded) {
  // Only the sm_90a body declares static shared memory (its mbarriers); the stubs have none.
  return cuda::image_with_static_smem(&sm90::gemm_sm90_kernel<256, sm90::kSm90BF16, true, false>,
                                      loaded);
}

}  // namespace lltm_ext::gemm
