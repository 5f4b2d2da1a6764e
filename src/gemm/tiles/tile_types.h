// The GEMM's tile configurations and launch parameters: plain C++ types (no device code), shared
// by the kernels (gemm/tiles/), their launchers (gemm_kernels_*.cu), the host code that launches
// them and the heuristic that chooses a config (C++ compiler).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lltm_ext::gemm_tiles {

// How a K-contiguous operand (a row-major A, a transposed B) reaches shared memory in the
// cp.async kernel:
//   kAsyncTranspose: element-wise (4-byte) async copies into a K-major tile (As[k][m], Bs[k][n]);
//   kKMajor (A only): 16-byte async copies that keep it K-contiguous (As[m][k]; fragments read
//            4 k at a time, which costs the math loop registers);
//   kRegisters: 16-byte loads into registers one K step ahead, stored transposed into the K-major
//            tile after the current step's math, so the math loop is the one of an MN-contiguous
//            operand;
//   kShared: 16-byte async copies into a ring of K-contiguous staging tiles (rows unpadded, 16-byte
//            chunks swizzled), from which all threads transpose the next K step into a
//            double-buffered K-major tile in 4 x 4 blocks (four 16-byte shared loads and four
//            16-byte stores each) before the current step's math: the math loop of an
//            MN-contiguous operand, and no staging register held across it.
// An MN-contiguous operand is always copied as is (16-byte async copies into the K-major tile).
enum class KPath : int { kAsyncTranspose = 0, kKMajor = 1, kRegisters = 2, kShared = 3 };

// The paths of a @ b.T (both operands K-contiguous) where they differ from A_PATH and B_PATH:
//   kAsConfigured: they do not;
//   kRegisters: both through registers (KPath::kRegisters);
//   kARegisters: A through registers, B as B_PATH says (with kShared: one operand staged, the
//            other's registers stored into its double-buffered K-major tile after the math).
enum class NtPaths : int { kAsConfigured = 0, kRegisters = 1, kARegisters = 2 };

// Block tile BM x BN x BK; warp tile WM x WN; thread tile TM x TN; MIN_BLOCKS per SM (occupancy
// hint for the register allocator); STAGES: 0 for register-staged double buffering, >= 2 for a
// cp.async pipeline of that many shared buffers; A_PATH, B_PATH (cp.async only): see KPath;
// NT: see NtPaths; LATE_T (kShared): the staging tiles of step t + 1 are transposed after step
// t's math instead of before it.
template <int BM_, int BN_, int BK_, int WM_, int WN_, int TM_, int TN_, int MIN_BLOCKS_,
          int STAGES_ = 0, KPath A_PATH_ = KPath::kAsyncTranspose,
          KPath B_PATH_ = KPath::kAsyncTranspose, NtPaths NT_ = NtPaths::kAsConfigured,
          bool LATE_T_ = false>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, TM = TM_, TN = TN_;
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_, STAGES = STAGES_;
  static constexpr KPath A_PATH = A_PATH_, B_PATH = B_PATH_;
  static constexpr NtPaths NT = NT_;
  static constexpr bool LATE_T = LATE_T_;
  // The paths of A and B for one layout pair (which of them are K-contiguous).
  static constexpr KPath a_path(bool a_k, bool b_k) {
    return NT != NtPaths::kAsConfigured && a_k && b_k ? KPath::kRegisters : A_PATH;
  }
  static constexpr KPath b_path(bool a_k, bool b_k) {
    return NT == NtPaths::kRegisters && a_k && b_k ? KPath::kRegisters : B_PATH;
  }
  static constexpr bool A_SMEM_K = A_PATH == KPath::kKMajor;
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int TWM = WM / TM;  // threads of a warp along m
  static constexpr int TWN = WN / TN;  // threads of a warp along n
  // Shared rows padded by 4 elements: the transposing stores of a K-contiguous operand then fall
  // into different banks for k and k + 4, and the rows of a K-major A tile (LDK_S) into different
  // 16-byte bank groups for consecutive m.
  static constexpr int LDA_S = BM + 4, LDB_S = BN + 4, LDK_S = BK + 4;
  static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are made of 4 x 4 sub-blocks");
  static_assert(WM % TM == 0 && WN % TN == 0 && TWM * TWN == 32, "a warp is 32 threads");
  static_assert(BK % 4 == 0, "BK is a multiple of the 4-element load");
  static_assert(STAGES == 0 || STAGES >= 2, "STAGES: 0 (register-staged) or >= 2 (cp.async)");
  static_assert((A_PATH == KPath::kAsyncTranspose && B_PATH == KPath::kAsyncTranspose) ||
                    STAGES >= 2,
                "A_PATH and B_PATH are cp.async options");
  static_assert(B_PATH != KPath::kKMajor, "B is always K-major in shared memory");
  static constexpr bool SHARED = A_PATH == KPath::kShared;
  static_assert((B_PATH == KPath::kShared) == SHARED, "kShared is a path for both operands");
  static_assert(!SHARED || BK == 16, "the staging tiles' swizzle is made for 4 chunks a row");
  static_assert(NT == NtPaths::kAsConfigured || STAGES >= 2, "NT is a cp.async option");
  static_assert(!LATE_T || SHARED, "LATE_T is an option of the staging tiles (kShared)");
  static constexpr int BUFFERS = STAGES == 0 ? 2 : STAGES;
  // Elements of one A and one B buffer (an A buffer fits either layout of the A tile).
  static constexpr int A_TILE = A_SMEM_K && BM * LDK_S > BK* LDA_S ? BM * LDK_S : BK * LDA_S;
  static constexpr int B_TILE = BK * LDB_S;
  // kShared: a staging tile's row length (elements; unpadded, its chunks swizzled), and each
  // operand's region for its layout: a ring of BUFFERS K-major tiles, or for a K-contiguous
  // operand 2 K-major tiles and a ring of BUFFERS staging tiles.
  static constexpr int LDR_S = BK;
  static constexpr int a_region(bool a_k, bool b_k) {
    return a_k && a_path(a_k, b_k) == KPath::kShared ? 2 * A_TILE + BUFFERS * BM * LDR_S
                                                     : BUFFERS * A_TILE;
  }
  static constexpr int b_region(bool a_k, bool b_k) {
    return b_k && b_path(a_k, b_k) == KPath::kShared ? 2 * B_TILE + BUFFERS * BN * LDR_S
                                                     : BUFFERS * B_TILE;
  }
  // Dynamic shared memory of the kernel for one layout pair (by default row-major A and B, the
  // one whose occupancy the heuristic reads).
  template <typename Acc, bool A_KCONTIG = true, bool B_KCONTIG = false>
  static constexpr size_t smem_bytes() {
    return static_cast<size_t>(a_region(A_KCONTIG, B_KCONTIG) + b_region(A_KCONTIG, B_KCONTIG)) *
           sizeof(Acc);
  }
};

// Tiles of C along m grouped 8 at a time, so that blocks running together share A and B in L2.
constexpr int kGroupM = 8;

// One launch: C (M x N, row stride ldc) = A (M x K) B (K x N). A's element (m, k) is at
// a[m * lda + k] when A is K-contiguous (row-major), else at a[k * lda + m]; B's (k, n) at
// b[n * ldb + k] when B is K-contiguous (a transposed row-major matrix), else at b[k * ldb + n].
// With split-K (gridDim.z > 1), split z covers k in [z * k_split, (z + 1) * k_split) and writes
// its partial product to c + z * split_stride.
// Tail split-K (tail_splits > 0, gridDim.z == 1): blocks main_tiles .. main_tiles + tail_tiles *
// tail_splits - 1 take the last tail_tiles tiles (in block order), each split along K into
// tail_splits parts of tail_k_split; block main_tiles + s * tail_tiles + j writes split s of tail
// tile j as a dense BM x BN tile to tail_c + (s * tail_tiles + j) * BM * BN, and
// tail_reduce_kernel sums them into C in split order (deterministic).
template <typename T, typename OutT>
struct Params {
  const T* a;
  const T* b;
  OutT* c;
  int M, N, K;
  int64_t lda, ldb, ldc;
  int k_split;               // multiple of BK
  int64_t split_stride;      // elements between the partial products of two splits
  bool vec_a, vec_b, vec_c;  // 4-element vector access allowed (alignment and leading dimension)
  OutT* tail_c;              // tail split-K workspace (tail_splits > 0 only)
  int main_tiles, tail_tiles, tail_splits, tail_k_split;
};

// Blocks of one launch without split-K: one per BM x BN tile of C.
template <typename Cfg>
constexpr unsigned int tile_count(int M, int N) {
  return static_cast<unsigned int>(((M + Cfg::BM - 1) / Cfg::BM) * ((N + Cfg::BN - 1) / Cfg::BN));
}

}  // namespace lltm_ext::gemm_tiles
