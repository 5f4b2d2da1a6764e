// GEMM kernels, float32: the heuristic's cp.async configs 0 and 1 (gemm_configs.h).
#include "gemm/gemm_kernels.cuh"

LLTM_EXT_GEMM_F32_CONFIG(0)
LLTM_EXT_GEMM_F32_CONFIG(1)
