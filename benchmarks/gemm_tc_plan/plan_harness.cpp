// The tensor-core planner alone (src/gemm/gemm_tc_plan.{h,cpp}, plain C++), for plan_changes.py:
// reads one problem a line from stdin, "M N K tf32 a_kcontig b_kcontig a_aligned b_aligned a_words
// b_words a_sectors b_sectors c_trans sms", and prints its plan a line, the fields of the
// extension's `_tc_plan` tuple in its order. Fields a revision's planner lacks read as their
// defaults, so that one harness builds against older planners too.
#include <cstdint>
#include <cstdio>
#include <iostream>

#include "gemm/gemm_tc_plan.h"

namespace {

using lltm_ext::gemm::TcDevice;
using lltm_ext::gemm::TcKernel;
using lltm_ext::gemm::TcPlan;
using lltm_ext::gemm::TcProblem;

template <typename P>
void set_c_trans(P& p, bool v) {
  if constexpr (requires { p.c_trans; }) p.c_trans = v;
}

template <typename Q>
int cluster_of(const Q& q) {
  if constexpr (requires { q.cluster; }) return q.cluster;
  return 1;
}

template <typename Q>
int tile_m_of(const Q& q) {
  if constexpr (requires { q.tile_m; }) return q.tile_m;
  return 128;
}

}  // namespace

int main() {
  int64_t M = 0, N = 0, K = 0;
  int tf32 = 0, ak = 0, bk = 0, aa = 0, ba = 0, aw = 0, bw = 0, as = 0, bs = 0, ct = 0, sms = 0;
  while (std::cin >> M >> N >> K >> tf32 >> ak >> bk >> aa >> ba >> aw >> bw >> as >> bs >> ct >>
         sms) {
    TcProblem p;
    p.M = M;
    p.N = N;
    p.K = K;
    p.tf32 = tf32 != 0;
    p.a_kcontig = ak != 0;
    p.b_kcontig = bk != 0;
    p.a_aligned = aa != 0;
    p.b_aligned = ba != 0;
    p.a_words = aw != 0;
    p.b_words = bw != 0;
    p.a_sectors = as != 0;
    p.b_sectors = bs != 0;
    set_c_trans(p, ct != 0);
    TcDevice dev;
    dev.sms = sms;
    dev.wgmma = true;
    dev.mma = true;
    const TcPlan q = lltm_ext::gemm::plan_tensor_core(p, dev);
    const char* kernel = q.kernel == TcKernel::kWgmma ? "wgmma"
                         : q.kernel == TcKernel::kMma ? "mma"
                                                      : "none";
    std::printf("%s %d %d %d %lld %d %d %.6f %d %d %d\n", kernel, q.tile, q.aligned ? 1 : 0,
                q.splits, static_cast<long long>(q.k_split), q.copy_a ? 1 : 0, q.copy_b ? 1 : 0,
                q.us, q.words ? 1 : 0, cluster_of(q), tile_m_of(q));
  }
  return 0;
}
