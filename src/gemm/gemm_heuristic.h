// The float32 CUDA GEMM's schedule: tile config, K splits and tail split-K, chosen by a cost
// model of waves of blocks from the problem's shape and the GPU's facts. Plain C++ with no CUDA
// header, so the CPU module has it too and tests run it without a GPU (`_choose_tiles`);
// gemm_cuda_host.cpp passes it the current device's facts.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gemm/gemm_configs.h"

namespace lltm_ext::gemm {

// A float32 schedule: tile config (F32Configs' index), K splits, tail split-K (tail_tiles,
// tail_splits; 0: none).
struct Choice {
  int config, splits, tail_tiles, tail_splits;
  double cost = 0;  // the estimate, in the model's units (kSimtUnitsPerUs of them a microsecond)
};

// The model's units a microsecond on an H100 / H200 (one multiply-add of one SM at rate 1: about
// a full SM's float32 rate in cuBLAS's kernels), to set its estimates beside the tensor-core
// planner's (the exact float32 GEMM on the tensor cores).
inline constexpr double kSimtUnitsPerUs = 1.93e5;

// The float32 kernels a GPU runs: the cp.async configs (sm_80 and newer), or the register-staged
// one (any GPU).
enum class TilePath { kAsync, kStaged };

// What the heuristic needs to know about the GPU.
struct GpuFacts {
  int sms;        // streaming multiprocessors, >= 1
  TilePath path;  // which configs are candidates
  // Resident blocks per SM of each float32 config (by F32Configs' index), as
  // cudaOccupancyMaxActiveBlocksPerMultiprocessor gives them; only the path's candidates are
  // read, and those must be >= 1.
  std::array<int, kNumF32Configs> blocks_per_sm;
};

// K per split when K is split into s parts with tiles of depth bk: rounded up to a multiple of bk
// (so fewer than s parts may be left; the heuristic and the launch both count them from this).
inline int64_t round_k_split(int64_t K, int s, int bk) {
  return ((K + s - 1) / s + bk - 1) / bk * bk;
}

// The configs the heuristic chooses from on `path`, in order of preference when costs tie.
std::vector<int> candidate_configs(TilePath path);

// The schedule for float32 C (M x N) = A (M x K) B (K x N), M, N, K >= 0; b_k_contig: B is
// K-contiguous (a transposed row-major matrix). Deterministic: a function of its arguments.
Choice choose_tiles(int64_t M, int64_t N, int64_t K, bool b_k_contig, const GpuFacts& gpu);

// The same from Python's arguments (`_choose_tiles`): path "async" or "staged", blocks_per_sm one
// entry per float32 config; each checked, with an error that names it.
Choice choose_tiles(int64_t M, int64_t N, int64_t K, int64_t sms, bool b_k_contig,
                    const std::string& path, const std::vector<int64_t>& blocks_per_sm);

}  // namespace lltm_ext::gemm
