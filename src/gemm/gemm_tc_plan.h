// The plan of a tensor-core GEMM call (bfloat16 / float16, or float32 as TF32): which kernel, which
// block tile, how many K splits, which operands are copied first. Plain C++ (CPU builds have it
// too, for tests): the CUDA host code (gemm_tc_cuda_host.cpp) gives it the problem and the device.
#pragma once

#include <array>
#include <cstdint>

namespace lltm_ext::gemm {

enum class TcKernel : int { kNone = 0, kWgmma = 1, kMma = 2 };

// The wgmma kernel's block tile widths besides 64, 128 and 256, which fit some grids' tiles to
// whole rounds of SMs (docs/decisions.md#wgmma-width); tools/codegen/sm90_wgmma.py writes their
// wgmma instructions.
inline constexpr std::array<int, 3> kWgmmaWideTiles = {144, 168, 192};

// The widths of the wgmma kernel's 256-row block tiles (16-bit types, B K-major): each consumer
// warpgroup sums two 64-row slabs, more math per byte loaded than a 128-row tile, in tile counts
// that fit some grids to whole rounds where no 128-row width does (docs/decisions.md#wgmma-tall).
inline constexpr std::array<int, 1> kWgmmaTallTiles = {152};

// The wgmma kernel's tile walk: tiles go column by column within groups of this many tile rows, so
// that the blocks running at once share panels of A and B in L2 (Sm90Params::group; the default of
// _set_gemm_wgmma_knobs' group; docs/decisions.md#wgmma-group).
inline constexpr int kWgmmaGroup = 16;

// One call: c (M x N) = a (M x K) @ b (K x N), each operand K-major or not, each aligned (a
// 16-byte aligned base and rows a multiple of 16 bytes apart: what TMA and 16-byte cp.async copies
// need) or not, and if not, 4-byte aligned (the same for 4 bytes: 4-byte cp.async copies) or not;
// an aligned operand's rows whole 32-byte sectors apart (TMA reads them at full speed) or not.
struct TcProblem {
  int64_t M = 0, N = 0, K = 0;
  bool tf32 = false;  // float32 operands read as tf32 (else 16-bit operands)
  // float32 at full precision, in three tf32 passes (tf32 is set too): the wgmma kernel only, 64
  // or 128 wide, both operands first split into tf32 big and small parts by a copy.
  bool x3 = false;
  bool a_kcontig = true, b_kcontig = true;
  bool a_aligned = true, b_aligned = true;
  bool a_words = true, b_words = true;
  bool a_sectors = true, b_sectors = true;
};

// What the device runs: its SM count, and which tensor-core kernels its loaded images have.
struct TcDevice {
  int sms = 0;
  bool wgmma = false;  // the Hopper kernel (sm_90a image)
  bool mma = false;    // the mma.sync kernel (image compiled for sm_80 or newer)
};

struct TcPlan {
  TcKernel kernel = TcKernel::kNone;
  // wgmma: operands copied first into aligned (and, for tf32, K-major) scratch matrices, rows
  // whole 128 bytes apart.
  bool copy_a = false, copy_b = false;
  int tile = 0;         // wgmma: block tile width 64 / 128 / 192 / 256; mma: 64 / 128 / 256
  int tile_m = 128;     // wgmma: block tile rows, 128, or 256 (at kWgmmaTallTiles' widths)
  bool aligned = true;  // mma: 16-byte cp.async copies (both operands aligned), else ...
  bool words = false;   // ... 4-byte cp.async copies (both 4-byte aligned), else registers
  int splits = 1;       // K splits (more than one: float32 partials and a reduction)
  int64_t k_split = 0;  // K elements per split (mma: a multiple of 32, wgmma: of 64), splits > 1
  // wgmma: blocks in clusters of this many (1 or 2; 2: neighbouring tile rows share B's stages,
  // each block loading half of them for both): where B is read in place from rows that start
  // inside 32-byte sectors, and for 256-row tiles (docs/decisions.md#wgmma-clusters). Set by
  // plan_tensor_core.
  int cluster = 1;
  double us = 0;  // the cost model's estimate, microseconds
};

// Forced choices (tuning and tests): kernel kNone leaves everything to the model; otherwise that
// kernel, and tile / splits where > 0; unaligned forces mma off its 16-byte copies (onto the
// 4-byte ones where the operands allow, else registers), registers onto its register-staged loads,
// copy wgmma's copies (of both operands). A forced kernel copies only the operands it cannot read
// as they are, never for speed alone.
struct TcForce {
  TcKernel kernel = TcKernel::kNone;
  int tile = 0;
  int tile_m = 0;  // wgmma: block tile rows, 0 (the model's), 128 or 256 (kWgmmaTallTiles)
  int splits = 0;
  bool unaligned = false;
  bool registers = false;
  bool copy = false;
};

// The plan with the least modelled time among the kernels `dev` runs (kNone when it runs
// neither), or the forced one (kNone when the forced kernel cannot run here).
TcPlan plan_tensor_core(const TcProblem& p, const TcDevice& dev, const TcForce& force = {});

// The model's time of `plan` for p on dev (microseconds): what plan_tensor_core minimizes.
double tc_cost_us(const TcProblem& p, const TcDevice& dev, const TcPlan& plan);
// Whether a wgmma plan on `sms` SMs runs in clusters of two (TcPlan::cluster): 128-row tiles where
// B is read in place from rows that start inside sectors, tiles 128 or more wide, two tile rows or
// more; 256-row tiles unsplit over two tile rows or more, where the pairs take no more rounds.
bool wgmma_clusters(const TcProblem& p, const TcPlan& plan, int sms);

}  // namespace lltm_ext::gemm
