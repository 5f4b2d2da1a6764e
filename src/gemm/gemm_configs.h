// The GEMM's CUDA tile configs and the launchers of their kernels: what the host code
// (gemm_cuda_host.cpp, C++ compiler) and the kernel files (gemm_kernels_*.cu, nvcc) share. Plain
// C++ with CUDA runtime types: no device code here (the kernels are in common/gemm_tiles.cuh).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <tuple>

#include "common/gemm_tile_types.h"

namespace lltm_ext::gemm {

namespace gt = lltm_ext::gemm_tiles;

// float32 tile configs: Tile<BM, BN, BK, WM, WN, TM, TN, MIN_BLOCKS, STAGES, A_PATH, B_PATH>
// (STAGES 0: register-staged double buffering; >= 2: cp.async ring; A_PATH / B_PATH: how a
// K-contiguous A / B reaches shared memory, gemm_tiles::KPath). 0-3 are the heuristic's
// candidates; 4-7 are there for tuning runs (scripts/gemm_steps), measured in
// docs/gemm_notes.md. The index is the `config` of the tuning entry point.
inline constexpr auto kKMajor = gt::KPath::kKMajor, kRegs = gt::KPath::kRegisters;
using F32Configs = std::tuple<                                   //
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, kRegs, kRegs>,     // 0
    gt::Tile<128, 256, 16, 32, 128, 8, 16, 1, 3, kRegs, kRegs>,  // 1
    gt::Tile<128, 128, 16, 32, 128, 8, 16, 2, 3, kRegs, kRegs>,  // 2
    gt::Tile<64, 64, 16, 32, 32, 4, 8, 4, 3, kRegs, kRegs>,      // 3
    gt::Tile<128, 128, 8, 32, 64, 8, 8, 2>,                      // 4
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, kKMajor>,          // 5
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3>,                   // 6
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 4, kRegs, kRegs>>;    // 7
inline constexpr int kNumF32Configs = std::tuple_size_v<F32Configs>;
inline constexpr std::array<const char*, kNumF32Configs> kF32ConfigNames = {
    "64x128x16 t8x8 128thr async3",        "128x256x16 t8x16 256thr async3",
    "128x128x16 t8x16 128thr async3",      "64x64x16 t4x8 128thr async3",
    "128x128x8 t8x8 256thr staged",        "64x128x16 t8x8 128thr async3 A K-major",
    "64x128x16 t8x8 128thr async3 copy-T", "64x128x16 t8x8 128thr async4"};
// The heuristic's candidates and their sustained float32 rates relative to each other with the
// GPU full, for an MN-contiguous B (row-major) and a K-contiguous one (a transposed view, as in
// backward's grad_c @ b.T), whose register transposes weigh more on the small tiles (measured on
// an H200, 132 SMs: docs/gemm_notes.md, step 14).
// Other dtypes: correctness first. Half types compute in float; float64 in float64.
using HalfConfig = gt::Tile<128, 128, 8, 32, 64, 8, 8, 2>;
using F64Config = gt::Tile<64, 64, 8, 32, 32, 4, 8, 2>;

// Launchers, defined in gemm_kernels.cuh and instantiated in the gemm_kernels_*.cu files for the
// configs above. Each returns the CUDA error of its launch (or query).

// C = A B with config Cfg on `stream` (see gemm_tiles::launch_tiles), for either layout of A and
// of B (a_kcontig: A is row-major; b_kcontig: B is a transposed row-major matrix).
template <typename Cfg, typename T, typename OutT>
cudaError_t launch(const gt::Params<T, OutT>& p, bool a_kcontig, bool b_kcontig, int splits,
                   cudaStream_t stream);

// Resident blocks per SM of config Cfg's float32 kernel (row-major A and B), its dynamic shared
// memory allowed first.
template <typename Cfg>
cudaError_t blocks_per_sm(int* blocks);

// The PTX version the loaded image of config Cfg's float32 kernel was compiled from (e.g. 90; 75
// when the driver compiled compute_75 PTX for a newer GPU).
template <typename Cfg>
cudaError_t ptx_version(int* version);

// c[i] = sum over s < splits of partial[s * n + i] (gemm_tiles::splitk_reduce_kernel).
template <typename Acc, typename OutT>
cudaError_t launch_splitk_reduce(const Acc* partial, OutT* c, int64_t n, int splits, bool vec,
                                 unsigned int blocks, int threads, cudaStream_t stream);

// Tail split-K's reduction into C (gemm_tiles::tail_reduce_kernel) for config Cfg's tiles.
template <typename Cfg, typename T>
cudaError_t launch_tail_reduce(const T* partial, T* c, int M, int N, int64_t ldc, int main_tiles,
                               int tail_tiles, int splits, bool vec_c, unsigned int blocks,
                               int threads, cudaStream_t stream);

}  // namespace lltm_ext::gemm
