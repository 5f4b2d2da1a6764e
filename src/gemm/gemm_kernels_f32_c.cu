// GEMM kernels, float32: config 4 (register-staged, the path of GPUs before sm_80) and the tuning
// reference configs 5-7 (gemm_configs.h).
#include "gemm/gemm_kernels.cuh"

LLTM_EXT_GEMM_F32_CONFIG(4)
LLTM_EXT_GEMM_F32_CONFIG(5)
LLTM_EXT_GEMM_F32_CONFIG(6)
LLTM_EXT_GEMM_F32_CONFIG(7)
