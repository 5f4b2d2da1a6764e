// The GEMM's CUDA tile configs, by index, and their names: plain C++ (no CUDA header), read by the
// kernel files (gemm_kernels_*.cu), the host code that launches them (gemm_cuda_host.cpp) and the
// tile heuristic (gemm_heuristic.cpp, also in the CPU module). The kernels are in gemm/tiles/.
#pragma once

#include <array>
#include <tuple>

#include "gemm/tiles/tile_types.h"

namespace lltm_ext::gemm {

namespace gt = lltm_ext::gemm_tiles;

// float32 tile configs: Tile<BM, BN, BK, WM, WN, TM, TN, MIN_BLOCKS, STAGES, A_PATH, B_PATH, NT,
// LATE_T> (STAGES 0: register-staged double buffering; >= 2: cp.async ring; A_PATH / B_PATH:
// how a K-contiguous A / B reaches shared memory, gemm_tiles::KPath; NT: the paths of a @ b.T
// where they differ, gemm_tiles::NtPaths; LATE_T: staging tiles transposed after the math).
// 0-3 and 11-15 are the heuristic's candidates on the cp.async path (11 only for a K-contiguous
// B; 14 and 15 the narrow tiles, for outputs of few columns, resp. rows) and 4 on the
// register-staged one (gemm_heuristic.cpp); 5-10 are there for tuning runs
// (benchmarks/gemm_steps), measured in docs/gemm_notes.md. The index is the `config` of the
// tuning entry point.
inline constexpr auto kKMajor = gt::KPath::kKMajor, kRegs = gt::KPath::kRegisters;
inline constexpr auto kShared = gt::KPath::kShared;
inline constexpr auto kNtRegs = gt::NtPaths::kRegisters, kNtARegs = gt::NtPaths::kARegisters;
using F32Configs = std::tuple<                                                      //
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, kShared, kShared>,                    // 0
    gt::Tile<128, 256, 16, 32, 128, 8, 16, 1, 3, kShared, kShared, kNtRegs>,        // 1
    gt::Tile<128, 128, 16, 32, 128, 8, 16, 2, 3, kRegs, kRegs>,                     // 2
    gt::Tile<64, 64, 16, 32, 32, 4, 8, 4, 3, kRegs, kRegs>,                         // 3
    gt::Tile<128, 128, 8, 32, 64, 8, 8, 2>,                                         // 4
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, kKMajor>,                             // 5
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3>,                                      // 6
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 4, kRegs, kRegs>,                        // 7
    gt::Tile<64, 128, 16, 32, 64, 8, 8, 3, 3, kRegs, kRegs>,                        // 8
    gt::Tile<128, 128, 16, 32, 128, 8, 16, 2, 3, kShared, kShared>,                 // 9
    gt::Tile<128, 256, 16, 32, 128, 8, 16, 1, 3, kRegs, kRegs>,                     // 10
    gt::Tile<256, 128, 16, 64, 64, 16, 8, 1, 3, kShared, kShared, kNtARegs, true>,  // 11
    gt::Tile<128, 128, 16, 32, 64, 8, 8, 2, 3, kShared, kShared>,                   // 12
    gt::Tile<128, 64, 16, 32, 64, 8, 8, 3, 3, kShared, kShared>,                    // 13
    gt::Tile<128, 32, 16, 32, 32, 4, 8, 4, 3, kShared, kShared>,                    // 14
    gt::Tile<32, 128, 16, 32, 32, 4, 8, 4, 3, kShared, kShared>>;                   // 15
inline constexpr int kNumF32Configs = std::tuple_size_v<F32Configs>;
inline constexpr std::array<const char*, kNumF32Configs> kF32ConfigNames = {
    "64x128x16 t8x8 128thr async3 smem-T",  "128x256x16 t8x16 256thr async3 smem-T/NT-regs",
    "128x128x16 t8x16 128thr async3",       "64x64x16 t4x8 128thr async3",
    "128x128x8 t8x8 256thr staged",         "64x128x16 t8x8 128thr async3 A K-major",
    "64x128x16 t8x8 128thr async3 copy-T",  "64x128x16 t8x8 128thr async4",
    "64x128x16 t8x8 128thr async3",         "128x128x16 t8x16 128thr async3 smem-T",
    "128x256x16 t8x16 256thr async3",       "256x128x16 t16x8 256thr async3 smem-T late/NT A-regs",
    "128x128x16 t8x8 256thr async3 smem-T", "128x64x16 t8x8 128thr async3 smem-T",
    "128x32x16 t4x8 128thr async3 smem-T",  "32x128x16 t4x8 128thr async3 smem-T"};
// Other dtypes: correctness first. Half types compute in float; float64 in float64.
using HalfConfig = gt::Tile<128, 128, 8, 32, 64, 8, 8, 2>;
using F64Config = gt::Tile<64, 64, 8, 32, 32, 4, 8, 2>;

}  // namespace lltm_ext::gemm
