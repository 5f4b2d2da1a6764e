// GEMM kernels, float32: the heuristic's cp.async configs 2, 3 and 11 (gemm_configs.h).
#include "gemm/gemm_kernels.cuh"

LLTM_EXT_GEMM_F32_CONFIG(2)
LLTM_EXT_GEMM_F32_CONFIG(3)
LLTM_EXT_GEMM_F32_CONFIG(11)
