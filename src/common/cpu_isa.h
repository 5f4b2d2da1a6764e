// Which instruction set the CPU loops run with, chosen once per process at run time.
//
// The package is compiled for the baseline x86-64 ISA (SSE2) so that it loads on any x86-64 CPU;
// the hot loops (the element-wise loops, elementwise_cpu.h, and the GEMM's micro-kernel,
// gemm/gemm_cpu.cpp) are compiled twice more, for AVX2 + FMA and for AVX-512 (F, VL, BW, DQ), and
// the widest copy the CPU runs is used. LLTM_EXT_CPU_ISA caps the choice at run time, to compare
// the copies or to rule one out (settings.h says how). Other CPUs (aarch64) run the baseline build.
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "common/env_setting.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LLTM_EXT_CPU_X86_COPIES 1
#else
#define LLTM_EXT_CPU_X86_COPIES 0
#endif

#if LLTM_EXT_CPU_X86_COPIES
// How a hot loop gets its AVX2 + FMA and AVX-512 copies: a wrapper function with
// LLTM_EXT_FLATTEN_FOR(features), which calls the baseline code. `flatten` inlines everything the
// wrapper calls (the loop, its element math) into it, so all of it is compiled (and vectorized)
// for that target, and nothing compiled for it is emitted out of line, where the baseline code
// could link to it. A wrapper is called only where cpu::isa() (below) allows its features.
#define LLTM_EXT_FLATTEN_FOR(features) __attribute__((target(features), flatten))
#define LLTM_EXT_AVX2_FEATURES "avx2,fma"
#define LLTM_EXT_AVX512_FEATURES "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"
#endif

namespace lltm_ext::cpu {

enum class Isa { kBaseline, kAvx2, kAvx512 };

inline bool cpu_has_avx2() {
#if LLTM_EXT_CPU_X86_COPIES
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

inline bool cpu_has_avx512() {
#if LLTM_EXT_CPU_X86_COPIES
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

// The loops' ISA: the widest the CPU runs, capped by LLTM_EXT_CPU_ISA if set. A bad value is an
// error (raised by the first op that asks, and again by each later one).
inline Isa isa() {
  static const Isa chosen = [] {
    constexpr settings::ChoiceKey kCap = "LLTM_EXT_CPU_ISA";
    const std::string want = settings::env_raw(kCap);
    TORCH_CHECK(settings::find_choice(kCap, want) >= 0, kCap->name, " must be ",
                settings::expected_text(*kCap), ", not '", want, "'");
    if (want != "baseline" && want != "avx2" && cpu_has_avx512()) {
      return Isa::kAvx512;
    }
    return want != "baseline" && cpu_has_avx2() ? Isa::kAvx2 : Isa::kBaseline;
  }();
  return chosen;
}

inline const char* isa_name(Isa which) {
  switch (which) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2+fma";
    default:
      return "baseline";
  }
}

// The name of isa(): "avx512", "avx2+fma" or "baseline".
inline const char* isa_name() {
  return isa_name(isa());
}

}  // namespace lltm_ext::cpu
