// Every header the CPU GEMM's kernel copies use, included by each gemm_cpu_<isa>.cpp before it
// opens its target region (so that no library code is compiled for that region's ISA).
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>

#include "common/cpu_isa.h"
#include "gemm/cpu/api.h"

#if LLTM_EXT_CPU_X86_COPIES
#include <cpuid.h>
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif
