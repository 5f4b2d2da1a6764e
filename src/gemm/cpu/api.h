// The CPU GEMM's problem description, paths, test knobs and per-ISA entry points.
//
// gemm_cpu.cpp turns tensors into a Problem and calls the entry point of the ISA copy that
// cpu::isa() picks: run_baseline (gemm_cpu_baseline.cpp), run_avx2 (gemm_cpu_avx2.cpp) or
// run_avx512 (gemm_cpu_avx512.cpp), each the same code (gemm/cpu/driver.h) compiled for its ISA.
#pragma once

#include <cstdint>

namespace lltm_ext::gemm::cpugemm {

enum class Dtype { kFloat, kDouble, kBFloat16, kHalf };

// C (M x N) = A (M x K) @ B (K x N); each operand with any non-negative element strides (views
// such as a.t(), expanded rows); M, N, K >= 1. C's elements do not overlap A's or B's.
struct Problem {
  int64_t M, N, K;
  const void* a;
  int64_t sam, sak;
  const void* b;
  int64_t sbk, sbn;
  void* c;
  int64_t scm, scn;
};

// The ways a product runs (driver.h says when each is chosen):
// kPacked: A and B packed into panels, register-tiled micro-kernel (any layout);
// kRows: A packed, B read in place (B, or A for C^T = B^T A^T, with unit stride along N);
// kDot: dot products along K (B, or A for C^T, with unit stride along K), A packed if needed;
// kDirect: nothing packed, A and B read where they are (float and double, AVX2 and AVX-512 copies).
enum class Path : int { kAuto = 0, kPacked = 1, kRows = 2, kDot = 3, kDirect = 4 };

const char* path_name(Path path);

// What a test may force: the path (kAuto: the heuristic; a forced path that the operands' layout
// cannot take falls back to kPacked), the number of parts the product is cut into for threads (0:
// from the amount of work; n: n parts even for tiny work, run on at most at::get_num_threads()
// threads), whether bfloat16 may use the AVX-512 BF16 dot-product instructions, the orientation,
// and whether bfloat16's packed path may run on AMX tiles.
struct Knobs {
  Path path = Path::kAuto;
  int parts = 0;
  bool bf16_dot = true;
  int transpose = -1;  // -1: the heuristic's orientation; 0: C = A B; 1: C^T = B^T A^T (if the
                       // path can run so)
  bool amx = true;
};

// What a call ran: the path, whether it computed C^T = B^T A^T, the parts, the bf16 dot-product
// kernels (AVX-512 BF16) or not, the AMX tiles or not.
struct Report {
  Path path = Path::kAuto;
  bool transposed = false;
  int parts = 1;
  bool bf16_dot = false;
  bool amx = false;
};

Report run_baseline(Dtype dtype, const Problem& p, const Knobs& knobs);
Report run_avx2(Dtype dtype, const Problem& p, const Knobs& knobs);
Report run_avx512(Dtype dtype, const Problem& p, const Knobs& knobs);

}  // namespace lltm_ext::gemm::cpugemm
