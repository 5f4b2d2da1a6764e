// GEMM kernels of the other dtypes (float64; float16 and bfloat16, computed in float) and the
// split-K reductions (gemm_configs.h, gemm_launchers.h).
#include "gemm/gemm_kernels.cuh"

namespace lltm_ext::gemm {

template cudaError_t launch<F64Config, double, double>(const gt::Params<double, double>&, bool,
                                                       bool, int, cudaStream_t);
template cudaError_t launch<HalfConfig, c10::Half, c10::Half>(
    const gt::Params<c10::Half, c10::Half>&, bool, bool, int, cudaStream_t);
template cudaError_t launch<HalfConfig, c10::BFloat16, c10::BFloat16>(
    const gt::Params<c10::BFloat16, c10::BFloat16>&, bool, bool, int, cudaStream_t);
template cudaError_t launch_tail_reduce<F64Config, double>(const double*, double*, int, int,
                                                           int64_t, int, int, int, bool,
                                                           unsigned int, int, cudaStream_t);
template cudaError_t launch_splitk_reduce<float, float>(const float*, float*, int64_t, int, bool,
                                                        unsigned int, int, cudaStream_t);
template cudaError_t launch_splitk_reduce<float, c10::Half>(const float*, c10::Half*, int64_t, int,
                                                            bool, unsigned int, int, cudaStream_t);
template cudaError_t launch_splitk_reduce<float, c10::BFloat16>(const float*, c10::BFloat16*,
                                                                int64_t, int, bool, unsigned int,
                                                                int, cudaStream_t);
template cudaError_t launch_splitk_reduce_grouped<float, float>(const float*, float*, int64_t, int,
                                                                bool, unsigned int, cudaStream_t);
template cudaError_t launch_splitk_reduce_grouped<float, c10::Half>(const float*, c10::Half*,
                                                                    int64_t, int, bool,
                                                                    unsigned int, cudaStream_t);
template cudaError_t launch_splitk_reduce_grouped<float, c10::BFloat16>(const float*,
                                                                        c10::BFloat16*, int64_t,
                                                                        int, bool, unsigned int,
                                                                        cudaStream_t);
template cudaError_t launch_splitk_reduce_grouped<double, double>(const double*, double*, int64_t,
                                                                  int, bool, unsigned int,
                                                                  cudaStream_t);
template cudaError_t launch_splitk_reduce<double, double>(const double*, double*, int64_t, int,
                                                          bool, unsigned int, int, cudaStream_t);

}  // namespace lltm_ext::gemm
