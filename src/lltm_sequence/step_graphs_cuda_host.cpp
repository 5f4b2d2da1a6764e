// The per-step time loops' CUDA graphs (CUDA builds only): the cache of captured loops, their
// capture and their replay (step_graphs.h has the contract).
//
// A capture runs on a stream of its own (one per thread and device: no other thread's work can
// land in it) in thread-local mode, with cuBLAS's workspace set to one that the cache owns for
// the stream the graph replays on; torch's own workspace for that stream may be freed and reused
// between calls (torch.cuda.empty_cache, graph pools), a captured address must not be. Graphs
// replayed on one stream run one after another, so they share its workspace.
#include "lltm_sequence/step_graphs.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>

#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <utility>

#include "common/env_setting.h"
#include "lltm_sequence/cublas_gemm.h"

namespace lltm_ext::lltm {
namespace {

// Graphs kept (the least recently used one is destroyed past this).
constexpr size_t kMaxGraphs = 256;

struct Entry {
  cudaGraphExec_t exec = nullptr;  // null: seen once (or uncapturable)
  bool uncapturable = false;       // its capture failed: always direct
  uint64_t last_use = 0;
};

struct Cache {
  std::mutex mutex;
  std::map<LoopKey, Entry> entries;
  // cuBLAS's workspace for captures, per (device, replay stream); never freed (graphs may hold it)
  std::map<std::pair<int, cudaStream_t>, c10::DataPtr> workspaces;
  uint64_t clock = 0;
};

// Never destroyed: graphs and device memory outlive the CUDA context at exit.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

std::atomic<int64_t> direct_count{0}, captured_count{0}, replayed_count{0};

// This thread's capture: none, under way, or under way and refused by a product.
enum class Capture { kNone, kUnderWay, kRefused };
thread_local Capture capture_state = Capture::kNone;

// The stream this thread captures on, on `device`: created once, never destroyed.
cudaStream_t capture_stream(int device) {
  thread_local std::map<int, cudaStream_t> streams;
  auto it = streams.find(device);
  if (it == streams.end()) {
    cudaStream_t s = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    it = streams.emplace(device, s).first;
  }
  return it->second;
}

// The workspace that cuBLAS uses in graphs replayed on `stream` (caller holds the cache's mutex).
void* graph_workspace(Cache& c, int device, cudaStream_t stream, size_t bytes) {
  auto it = c.workspaces.find({device, stream});
  if (it == c.workspaces.end()) {
    it = c.workspaces
             .emplace(std::make_pair(device, stream),
                      c10::cuda::CUDACachingAllocator::get()->allocate(bytes))
             .first;
  }
  return it->second.get();
}

// Keeps at most kMaxGraphs entries, dropping the least recently used (caller holds the mutex).
void evict(Cache& c) {
  while (c.entries.size() > kMaxGraphs) {
    auto oldest = c.entries.begin();
    for (auto it = c.entries.begin(); it != c.entries.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) {
        oldest = it;
      }
    }
    if (oldest->second.exec != nullptr) {
      (void)cudaGraphExecDestroy(oldest->second.exec);  // freed when done if still running
    }
    c.entries.erase(oldest);
  }
}

// Captures the loop on this thread's capture stream; null where the capture fails (a launch that
// a capture refuses). cuBLAS's stream, workspace and math mode are torch's again after.
cudaGraphExec_t capture(int device, void* workspace, size_t workspace_bytes, cublasHandle_t handle,
                        const std::function<void(cudaStream_t)>& enqueue) {
  const Cublas& api = Cublas::get();
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
  check_cublas(api.get_math_mode(handle, &mode), "cublasGetMathMode");
  const cudaStream_t cap = capture_stream(device);
  C10_CUDA_CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
  bool launched = true;
  bool moved = false;  // cuBLAS's handle left the capture's stream (its products ran, not captured)
  capture_state = Capture::kUnderWay;
  try {
    check_cublas(api.set_stream(handle, cap), "cublasSetStream");
    check_cublas(api.set_workspace(handle, workspace, workspace_bytes), "cublasSetWorkspace");
    enqueue(cap);
    cudaStream_t now = nullptr;
    check_cublas(api.get_stream(handle, &now), "cublasGetStream");
    moved = now != cap;
  } catch (const std::exception&) {
    launched = false;  // the caller's direct run raises it again if it is no capture's failure
  }
  launched = launched && capture_state == Capture::kUnderWay;
  capture_state = Capture::kNone;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(cap, &graph);
  (void)cudaGetLastError();  // a refused launch's error, answered by the direct run
  // torch's stream and workspace for the caller's stream, and the mode the caller's Blas set
  (void)at::cuda::getCurrentCUDABlasHandle();  // the same handle, on the current stream
  check_cublas(api.set_math_mode(handle, mode), "cublasSetMathMode");
  TORCH_CHECK(!moved,
              "lltm_ext.lltm_sequence: internal error: cuBLAS's stream changed while a time loop "
              "was captured (set LLTM_EXT_SEQUENCE_GRAPHS=off, and please report it)");
  cudaGraphExec_t exec = nullptr;
  if (launched && ended == cudaSuccess && graph != nullptr &&
      cudaGraphInstantiateWithFlags(&exec, graph, 0) != cudaSuccess) {
    exec = nullptr;
    (void)cudaGetLastError();
  }
  if (graph != nullptr) {
    (void)cudaGraphDestroy(graph);
  }
  return exec;
}

}  // namespace

void run_step_loop(const LoopKey& key, int64_t steps, cudaStream_t stream, cublasHandle_t handle,
                   const std::function<void(cudaStream_t)>& enqueue) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  const bool off = env_choice("LLTM_EXT_SEQUENCE_GRAPHS") == "off";  // read (checked) each call
  if (off || steps < kGraphMinSteps || status != cudaStreamCaptureStatusNone) {
    ++direct_count;
    enqueue(stream);
    return;
  }
  const int device = c10::cuda::current_device();
  const size_t workspace_bytes = at::cuda::getChosenWorkspaceSize();
  // cublas_lt_cuda_host.cpp's rule reads this setting at every product: part of what is launched;
  // and the stream it replays on (whose workspace the capture takes)
  LoopKey full = key;
  full.add(env_choice("LLTM_EXT_CUBLAS_UNSPLIT") != "off").add(device).add(stream);
  Cache& c = cache();
  void* workspace = nullptr;  // set: capture now
  {
    const std::lock_guard<std::mutex> lock(c.mutex);
    auto [it, first] = c.entries.try_emplace(full);
    it->second.last_use = ++c.clock;
    if (it->second.exec != nullptr) {
      C10_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream));  // locked: not destroyed meanwhile
      ++replayed_count;
      return;
    }
    if (!first && !it->second.uncapturable) {
      workspace = graph_workspace(c, device, stream, workspace_bytes);
    }
    evict(c);  // never the entry just used: it is the newest
  }
  if (workspace == nullptr) {  // first sighting, or uncapturable
    ++direct_count;
    enqueue(stream);
    return;
  }
  cudaGraphExec_t exec = capture(device, workspace, workspace_bytes, handle, enqueue);
  {
    const std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.entries.find(full);
    if (it != c.entries.end() && it->second.exec == nullptr) {  // else evicted, or another
      it->second.exec = exec;                                   // thread's graph is there
      it->second.uncapturable = exec == nullptr;
    }
    if (exec != nullptr) {
      C10_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      ++captured_count;
      if (it == c.entries.end() || it->second.exec != exec) {
        (void)cudaGraphExecDestroy(exec);  // not kept: freed when this launch is done
      }
      return;
    }
  }
  ++direct_count;  // the capture failed: directly (raising a launch's own error, if any)
  enqueue(stream);
}

bool step_capture_refuses() {
  if (capture_state == Capture::kNone) {
    return false;
  }
  capture_state = Capture::kRefused;
  return true;
}

std::vector<int64_t> step_graph_counts() {
  return {direct_count.load(), captured_count.load(), replayed_count.load()};
}

}  // namespace lltm_ext::lltm
