// GEMM kernels, float32: the heuristic's cp.async configs 2 and 3 (gemm_configs.h).
#include "gemm/gemm_kernels.cuh"

LLTM_EXT_GEMM_F32_CONFIG(2)
LLTM_EXT_GEMM_F32_CONFIG(3)
