// CUDA graphs of the per-step time loops (CUDA builds only): a loop that launches a cuBLAS product
// and a gate kernel every step, captured once and replayed with one launch per call.
//
// The cuBLAS path and the mixed-precision loops launch two or three kernels a step; the host's
// time per step (cuBLAS's call, the kernel launch) is often longer than the GPU's, and then calls
// back to back are bound by the host. A call whose loop (its kernels and every address they touch:
// the LoopKey) was seen before runs as a graph instead: captured on the second sighting, replayed
// from then on. The first sighting runs directly, so a shape seen once pays no capture.
//
// Direct always: under LLTM_EXT_SEQUENCE_GRAPHS=off, for loops of fewer than kGraphMinSteps steps,
// while the caller's stream is being captured (the caller's own graph holds the kernels), and for
// loops whose capture failed or was refused (step_capture_refuses).
#pragma once

#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

namespace lltm_ext::lltm {

// Loops of fewer steps than this run directly (their launches cost the host little).
constexpr int64_t kGraphMinSteps = 8;

// The loops that run_step_loop runs, told apart in their keys.
enum class StepLoop { kForward = 1, kBackward, kMixedForward, kMixedBackward };

// Everything a loop's launches depend on: which loop, its sizes, the settings it read, and every
// address it reads or writes. Two calls with equal keys launch the same kernels on the same memory.
class LoopKey {
 public:
  LoopKey& add(int64_t v) {
    words_.push_back(v);
    return *this;
  }
  LoopKey& add(const void* p) { return add(static_cast<int64_t>(reinterpret_cast<intptr_t>(p))); }
  template <typename E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
  LoopKey& add(E e) {
    return add(static_cast<int64_t>(e));
  }
  bool operator<(const LoopKey& o) const { return words_ < o.words_; }
  bool operator==(const LoopKey& o) const { return words_ == o.words_; }

 private:
  std::vector<int64_t> words_;
};

// Runs a loop of `steps` steps: enqueue(s) launches all of its work on stream s, cuBLAS's products
// through `handle` (whose stream and workspace are set to the capture's while it captures, and
// given back to torch's after). Directly on `stream`, or through the graph cached under `key`
// (see above). enqueue must launch only: no allocation, no synchronization, no copy to the host.
void run_step_loop(const LoopKey& key, int64_t steps, cudaStream_t stream, cublasHandle_t handle,
                   const std::function<void(cudaStream_t)>& enqueue);

// Whether a product must stay out of the graph being captured on this thread (false while none
// is; the capture is then given up, and the loop runs directly always): cuBLASLt's unsplit
// products (cublas_lt_cuda_host.cpp), whose handle from torch is its cuBLAS handle, set back to
// the caller's stream when fetched.
bool step_capture_refuses();

// How many loops ran directly, were captured, and were replayed, since the process began.
std::vector<int64_t> step_graph_counts();

}  // namespace lltm_ext::lltm
