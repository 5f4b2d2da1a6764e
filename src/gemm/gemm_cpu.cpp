// CPU kernel of lltm_ext.gemm: packed panels, cache blocking, parallel C blocks, SIMD micro-kernel.
//
// C is cut into MC x NC blocks (and K into parts when there are too few blocks for the threads),
// shared out over ATen's threads;
// each task packs KC-deep panels of A (MR rows) and B (NR columns) into contiguous buffers in the
// accumulation type, runs an MR x NR register-blocked micro-kernel over them, and writes its block
// once. The micro-kernel uses 32-byte GCC vectors and is compiled for plain x86-64, AVX2 + FMA and
// AVX-512, the copy picked by cpu::isa() (common/cpu_isa.h: the CPU, capped by LLTM_EXT_CPU_ISA),
// as the element-wise loops are. Operands may have any strides (views such as a.t() are read in
// place); half types are computed in float.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/cpu_isa.h"
#include "common/dispatch.h"
#include "gemm/gemm.h"

namespace lltm_ext::gemm {
namespace {

#define LLTM_EXT_ALWAYS_INLINE inline __attribute__((always_inline))

// 32-byte vectors of Acc (8 floats, 4 doubles).
template <typename Acc>
struct Vec {
  typedef Acc type __attribute__((vector_size(32)));
  static constexpr int kLanes = 32 / sizeof(Acc);
};

template <typename Acc>
struct Blocking {
  static constexpr int L = Vec<Acc>::kLanes;
  static constexpr int MR = 6;        // micro-tile rows: 6 x 2 vector accumulators
  static constexpr int NR = 2 * L;    // micro-tile columns
  static constexpr int KC = 256;      // depth of a packed panel (a B micro-panel fits in L1)
  static constexpr int MC = 16 * MR;  // rows of a C block (its packed A fits in L2)
  static constexpr int NC = 256;      // columns of a C block (a multiple of NR)
  static_assert(NC % NR == 0, "NC is a multiple of NR");
};

// C_block (MR x NR, row stride ldc) += A_panel (MR x kc, packed k-major) B_panel (kc x NR).
template <typename Acc>
LLTM_EXT_ALWAYS_INLINE void micro_kernel(int kc, const Acc* __restrict__ ap,
                                         const Acc* __restrict__ bp, Acc* __restrict__ c,
                                         int64_t ldc) {
  using B = Blocking<Acc>;
  using V = typename Vec<Acc>::type;
  V c0[B::MR], c1[B::MR];
  for (int i = 0; i < B::MR; ++i) c0[i] = c1[i] = V{};
  for (int p = 0; p < kc; ++p) {
    V b0, b1;
    std::memcpy(&b0, bp, sizeof(V));
    std::memcpy(&b1, bp + B::L, sizeof(V));
#pragma GCC unroll 6
    for (int i = 0; i < B::MR; ++i) {
      c0[i] += ap[i] * b0;
      c1[i] += ap[i] * b1;
    }
    ap += B::MR;
    bp += B::NR;
  }
#pragma GCC unroll 6
  for (int i = 0; i < B::MR; ++i) {
    V x0, x1;
    std::memcpy(&x0, c + i * ldc, sizeof(V));
    std::memcpy(&x1, c + i * ldc + B::L, sizeof(V));
    x0 += c0[i];
    x1 += c1[i];
    std::memcpy(c + i * ldc, &x0, sizeof(V));
    std::memcpy(c + i * ldc + B::L, &x1, sizeof(V));
  }
}

// Cbuf (mc x nc, both padded to MR / NR, row stride NC) += packed A (mc x kc) packed B (kc x nc).
template <typename Acc>
LLTM_EXT_ALWAYS_INLINE void block_kernel_impl(int mc, int nc, int kc, const Acc* ap, const Acc* bp,
                                              Acc* cbuf) {
  using B = Blocking<Acc>;
  for (int jr = 0; jr < nc; jr += B::NR) {  // a B micro-panel stays in L1 over all A panels
    for (int ir = 0; ir < mc; ir += B::MR) {
      micro_kernel<Acc>(kc, ap + ir * kc, bp + jr * kc, cbuf + ir * B::NC + jr, B::NC);
    }
  }
}

// block_kernel_impl compiled for the baseline ISA, and (x86-64) for AVX2 + FMA and for AVX-512.
template <typename Acc>
void block_kernel_baseline(int mc, int nc, int kc, const Acc* ap, const Acc* bp, Acc* cbuf) {
  block_kernel_impl<Acc>(mc, nc, kc, ap, bp, cbuf);
}

#if LLTM_EXT_CPU_X86_COPIES
template <typename Acc>
LLTM_EXT_FLATTEN_FOR(LLTM_EXT_AVX2_FEATURES)
void block_kernel_avx2(int mc, int nc, int kc, const Acc* ap, const Acc* bp, Acc* cbuf) {
  block_kernel_impl<Acc>(mc, nc, kc, ap, bp, cbuf);
}

template <typename Acc>
LLTM_EXT_FLATTEN_FOR(LLTM_EXT_AVX512_FEATURES)
void block_kernel_avx512(int mc, int nc, int kc, const Acc* ap, const Acc* bp, Acc* cbuf) {
  block_kernel_impl<Acc>(mc, nc, kc, ap, bp, cbuf);
}
#endif

// The copy of block_kernel_impl for `isa` (cpu::isa(), read once per GEMM by the caller).
template <typename Acc>
void block_kernel(cpu::Isa isa, int mc, int nc, int kc, const Acc* ap, const Acc* bp, Acc* cbuf) {
#if LLTM_EXT_CPU_X86_COPIES
  if (isa == cpu::Isa::kAvx512) {
    block_kernel_avx512<Acc>(mc, nc, kc, ap, bp, cbuf);
    return;
  }
  if (isa == cpu::Isa::kAvx2) {
    block_kernel_avx2<Acc>(mc, nc, kc, ap, bp, cbuf);
    return;
  }
#endif
  block_kernel_baseline<Acc>(mc, nc, kc, ap, bp, cbuf);
}

// The ISA of the copy the last GEMM ran (cpu::Isa as an int; -1: none yet), for cpu_kernel_isa().
std::atomic<int> g_last_isa{-1};

// A (rows i0 .. i0 + mc, k p0 .. p0 + kc; element (i, k) at a[i * si + k * sk]) -> MR-row panels,
// k-major, rows past M zero.
template <typename T, typename Acc>
void pack_a(Acc* dst, const T* a, int64_t si, int64_t sk, int64_t M, int64_t i0, int mc, int64_t p0,
            int kc) {
  constexpr int MR = Blocking<Acc>::MR;
  for (int ir = 0; ir < mc; ir += MR) {
    const int mr = static_cast<int>(std::clamp<int64_t>(M - i0 - ir, 0, MR));
    for (int i = 0; i < MR; ++i) {
      if (i < mr) {
        const T* src = a + (i0 + ir + i) * si + p0 * sk;
        for (int p = 0; p < kc; ++p) dst[p * MR + i] = static_cast<Acc>(src[p * sk]);
      } else {
        for (int p = 0; p < kc; ++p) dst[p * MR + i] = Acc(0);
      }
    }
    dst += MR * kc;
  }
}

// B (k p0 .. p0 + kc, columns j0 .. j0 + nc; element (k, j) at b[k * sk + j * sj]) -> NR-column
// panels, k-major, columns past N zero.
template <typename T, typename Acc>
void pack_b(Acc* dst, const T* b, int64_t sk, int64_t sj, int64_t N, int64_t j0, int nc, int64_t p0,
            int kc) {
  constexpr int NR = Blocking<Acc>::NR;
  for (int jr = 0; jr < nc; jr += NR) {
    const int nr = static_cast<int>(std::clamp<int64_t>(N - j0 - jr, 0, NR));
    if (sj == 1) {  // row-major B: columns contiguous
      for (int p = 0; p < kc; ++p) {
        const T* src = b + (p0 + p) * sk + j0 + jr;
        Acc* d = dst + p * NR;
        for (int j = 0; j < nr; ++j) d[j] = static_cast<Acc>(src[j]);
        for (int j = nr; j < NR; ++j) d[j] = Acc(0);
      }
    } else {  // k contiguous (or general strides): walk each column along k
      for (int j = 0; j < NR; ++j) {
        if (j < nr) {
          const T* src = b + p0 * sk + (j0 + jr + j) * sj;
          for (int p = 0; p < kc; ++p) dst[p * NR + j] = static_cast<Acc>(src[p * sk]);
        } else {
          for (int p = 0; p < kc; ++p) dst[p * NR + j] = Acc(0);
        }
      }
    }
    dst += NR * kc;
  }
}

// Tasks handed out one at a time, and the count of those not finished yet.
struct TaskCounter {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> left{0};
  std::mutex mutex;
  std::condition_variable all_done;
};

// Runs the claimed task `first` and claims more until none is left. `body` is used only for a
// claimed, unfinished task: the caller of parallel_tasks is still waiting then.
template <typename Scratch, typename Body>
void run_claimed(TaskCounter& counter, int64_t n, const Body& body, int64_t first) {
  Scratch scratch;
  for (int64_t t = first; t < n; t = counter.next.fetch_add(1)) {
    body(t, scratch);
    if (counter.left.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(counter.mutex);
      counter.all_done.notify_all();
    }
  }
}

// Runs body(task, scratch) for every task in [0, n), once each, on up to at::get_num_threads()
// threads; each thread makes its own Scratch before its first task. body must not throw.
// at::parallel_for is parallel only in code compiled with OpenMP (it is inline); without it the
// calling thread and helpers started on ATen's inter-op pool (at::launch) claim the tasks from a
// shared counter. A helper that starts after all tasks are claimed does nothing, so the caller
// never waits for a helper that cannot run.
template <typename Scratch, typename Body>
void parallel_tasks(int64_t n, const Body& body) {
#ifdef INTRA_OP_PARALLEL
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t t = begin; t < end; ++t) body(t, scratch);
  });
#else
  const int64_t threads = std::min<int64_t>(n, at::get_num_threads());
  if (threads <= 1) {
    Scratch scratch;
    for (int64_t t = 0; t < n; ++t) body(t, scratch);
    return;
  }
  auto counter = std::make_shared<TaskCounter>();
  counter->left = n;
  for (int64_t h = 1; h < threads; ++h) {
    at::launch([counter, n, body = &body] {
      const int64_t first = counter->next.fetch_add(1);
      if (first < n) run_claimed<Scratch>(*counter, n, *body, first);
    });
  }
  const int64_t first = counter->next.fetch_add(1);
  if (first < n) run_claimed<Scratch>(*counter, n, body, first);
  std::unique_lock<std::mutex> lock(counter->mutex);
  counter->all_done.wait(lock, [&] { return counter->left.load() == 0; });
#endif
}

// Packing buffers of one thread.
template <typename Acc>
struct PackScratch {
  using B = Blocking<Acc>;
  std::vector<Acc> a_pack = std::vector<Acc>(static_cast<size_t>(B::MC) * B::KC);
  std::vector<Acc> b_pack = std::vector<Acc>(static_cast<size_t>(B::KC) * B::NC);
  std::vector<Acc> c_buf = std::vector<Acc>(static_cast<size_t>(B::MC) * B::NC);
};

struct NoScratch {};

template <typename T>
void gemm_cpu_typed(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  using Acc = at::opmath_type<T>;
  using B = Blocking<Acc>;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const T* pa = a.const_data_ptr<T>();
  const T* pb = b.const_data_ptr<T>();
  T* pc = c.data_ptr<T>();
  const int64_t sam = a.stride(0), sak = a.stride(1), sbk = b.stride(0), sbn = b.stride(1);
  const cpu::Isa isa = cpu::isa();
  g_last_isa.store(static_cast<int>(isa), std::memory_order_relaxed);

  // Tasks: C blocks x K parts. K is split only when the blocks are fewer than the threads.
  const int64_t blocks_m = (M + B::MC - 1) / B::MC;
  const int64_t blocks_n = (N + B::NC - 1) / B::NC;
  const int64_t blocks = blocks_m * blocks_n;
  const int64_t threads = at::get_num_threads();
  int64_t k_parts = 1;
  if (blocks < threads) {
    k_parts = std::clamp<int64_t>(threads / blocks, 1, std::max<int64_t>(1, K / B::KC));
  }
  const int64_t k_per_part = (K + k_parts - 1) / k_parts;
  // K parts write float partials to a workspace, summed in order afterwards.
  std::vector<Acc> partial(k_parts > 1 ? static_cast<size_t>(k_parts * M * N) : 0);

  parallel_tasks<PackScratch<Acc>>(blocks * k_parts, [&](int64_t task, PackScratch<Acc>& s) {
    const int64_t part = task / blocks, block = task % blocks;
    const int64_t i0 = (block / blocks_n) * B::MC, j0 = (block % blocks_n) * B::NC;
    const int mc = static_cast<int>(std::min<int64_t>(B::MC, M - i0));
    const int nc = static_cast<int>(std::min<int64_t>(B::NC, N - j0));
    const int mc_pad = (mc + B::MR - 1) / B::MR * B::MR;
    const int nc_pad = (nc + B::NR - 1) / B::NR * B::NR;
    const int64_t k_begin = part * k_per_part, k_end = std::min(K, k_begin + k_per_part);
    std::fill(s.c_buf.begin(), s.c_buf.end(), Acc(0));
    for (int64_t p0 = k_begin; p0 < k_end; p0 += B::KC) {
      const int kc = static_cast<int>(std::min<int64_t>(B::KC, k_end - p0));
      pack_b(s.b_pack.data(), pb, sbk, sbn, N, j0, nc_pad, p0, kc);
      pack_a(s.a_pack.data(), pa, sam, sak, M, i0, mc_pad, p0, kc);
      block_kernel<Acc>(isa, mc_pad, nc_pad, kc, s.a_pack.data(), s.b_pack.data(), s.c_buf.data());
    }
    for (int i = 0; i < mc; ++i) {
      const Acc* src = s.c_buf.data() + static_cast<int64_t>(i) * B::NC;
      if (k_parts > 1) {
        std::copy(src, src + nc, partial.data() + (part * M + i0 + i) * N + j0);
      } else {
        T* dst = pc + (i0 + i) * N + j0;
        for (int j = 0; j < nc; ++j) dst[j] = static_cast<T>(src[j]);
      }
    }
  });

  if (k_parts > 1) {  // ordered sum of the K parts, in row chunks
    const int64_t rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1));
    parallel_tasks<NoScratch>((M + rows - 1) / rows, [&](int64_t chunk, NoScratch&) {
      for (int64_t i = chunk * rows; i < std::min(M, (chunk + 1) * rows); ++i) {
        for (int64_t j = 0; j < N; ++j) {
          Acc sum = Acc(0);
          for (int64_t s = 0; s < k_parts; ++s) sum += partial[(s * M + i) * N + j];
          pc[i * N + j] = static_cast<T>(sum);
        }
      }
    });
  }
}

}  // namespace

std::string cpu_kernel_isa() {
  const int isa = g_last_isa.load(std::memory_order_relaxed);
  return isa < 0 ? "" : cpu::isa_name(static_cast<cpu::Isa>(isa));
}

void gemm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  if (c.numel() == 0) return;
  LLTM_EXT_DISPATCH_FLOATING(a.scalar_type(), "gemm_cpu",
                             [&] { gemm_cpu_typed<scalar_t>(a, b, c); });
}

}  // namespace lltm_ext::gemm
