// The CPU GEMM's threads: the parts of a product claimed one at a time from a shared counter by
// the threads of ATen's intra-op pool (at::parallel_for: the OpenMP team torch's own ops use).
// Included inside a gemm_cpu_<isa>.cpp target region by gemm/cpu/driver.h.
//
// Claiming (rather than at::parallel_for's fixed split) lets a thread that starts late or runs on
// a core shared with other work take fewer parts. The team itself was measured against helpers
// from ATen's inter-op pool (at::launch; they claimed parts the same way, the caller never
// waiting for one that had not started, and spun a while after their last part before sleeping),
// on the development machine, interleaved with torch.mm at 2 threads, over random shapes large
// enough to split: the team was far ahead (its workers are still spinning from torch's last op,
// and a helper of another pool competes with them for the core). Figures:
// docs/decisions_cpu.md#cpu-threads.
#pragma once

namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS {
namespace {

// The parts of one product: the next to claim, and the first exception a part threw.
struct PartQueue {
  explicit PartQueue(int n) : parts(n) {}
  const int parts;
  std::atomic<int> next{0};
  std::mutex mutex;
  std::exception_ptr error;
};

// Claims parts of q until none is left and runs fn on each.
template <typename Fn>
void claim_parts(PartQueue& q, const Fn& fn) {
  for (int part = q.next.fetch_add(1); part < q.parts; part = q.next.fetch_add(1)) {
    try {
      fn(part);
    } catch (...) {
      std::lock_guard<std::mutex> lock(q.mutex);
      if (!q.error) q.error = std::current_exception();
    }
  }
}

// Runs fn(part) for every part in [0, parts) on up to at::get_num_threads() threads (serially
// inside another parallel region, or where at::parallel_for is serial).
template <typename Fn>
void run_parts(int parts, const Fn& fn) {
  const int threads = std::min(parts, at::get_num_threads());
  if (threads <= 1) {
    for (int part = 0; part < parts; ++part) fn(part);
    return;
  }
  PartQueue q(parts);
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) { claim_parts(q, fn); });
  if (q.error) std::rethrow_exception(q.error);
}

}  // namespace
}  // namespace lltm_ext::gemm::cpugemm::LLTM_GEMM_CPU_NS
