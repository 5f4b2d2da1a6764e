// The autocast kernels' rounded operands on CUDA (CUDA builds only): the host side of round.cu
// (lltm.h has the contract).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/cuda_host.h"
#include "lltm/lltm.h"
#include "lltm/lltm_launchers.h"

namespace lltm_ext::lltm {

void round_through_cuda(const std::vector<at::Tensor>& src, const std::vector<at::Tensor>& dst,
                        at::ScalarType dtype) {
  TORCH_INTERNAL_ASSERT(src.size() == dst.size());
  TORCH_INTERNAL_ASSERT(dtype == at::kHalf || dtype == at::kBFloat16);
  if (src.empty()) {
    return;
  }
  const c10::cuda::CUDAGuard guard(src[0].device());
  const int sms = cuda::sm_count(src[0].get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  for (size_t first = 0; first < src.size(); first += kRoundSegments) {
    RoundSegments segments{};
    for (size_t k = first; k < std::min(src.size(), first + kRoundSegments); ++k) {
      TORCH_INTERNAL_ASSERT(src[k].is_contiguous() && dst[k].is_contiguous() &&
                            src[k].scalar_type() == at::kFloat &&
                            dst[k].scalar_type() == at::kFloat && dst[k].numel() == src[k].numel());
      segments.segment[segments.count++] = RoundSegment{
          src[k].const_data_ptr<float>(), dst[k].mutable_data_ptr<float>(), src[k].numel()};
    }
    const cudaError_t launched = dtype == at::kHalf
                                     ? launch_round_through<c10::Half>(segments, sms, stream)
                                     : launch_round_through<c10::BFloat16>(segments, sms, stream);
    C10_CUDA_CHECK(launched);
  }
}

}  // namespace lltm_ext::lltm
