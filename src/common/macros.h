// Macros shared by host and device code, with no includes: safe in CPU, binding and .cu files.
#pragma once

// Marks functions callable from host and device code (plain inline functions elsewhere).
#ifdef __CUDACC__
#define LLTM_EXT_HD __host__ __device__ __forceinline__
#else
#define LLTM_EXT_HD inline
#endif
