// GEMM kernels, float32: the heuristic's narrow cp.async configs 14 (128 x 32) and 15 (32 x 128;
// gemm_configs.h).
#include "gemm/gemm_kernels.cuh"

LLTM_EXT_GEMM_F32_CONFIG(14)
LLTM_EXT_GEMM_F32_CONFIG(15)
