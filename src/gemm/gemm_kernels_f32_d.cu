// GEMM kernels, float32: the tuning configs 8-10 (the register-path versions of configs 0 and
// 1, and a 128 x 128 tile with staging tiles; gemm_configs.h).
#include "gemm/gemm_kernels.cuh"

LLTM_EXT_GEMM_F32_CONFIG(8)
LLTM_EXT_GEMM_F32_CONFIG(9)
LLTM_EXT_GEMM_F32_CONFIG(10)
