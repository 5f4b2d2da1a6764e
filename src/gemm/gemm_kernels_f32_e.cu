// GEMM kernels, float32: the heuristic's cp.async configs 12 and 13 (gemm_configs.h).
#include "gemm/gemm_kernels.cuh"

LLTM_EXT_GEMM_F32_CONFIG(12)
LLTM_EXT_GEMM_F32_CONFIG(13)
