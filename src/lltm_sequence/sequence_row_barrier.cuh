// The barrier between the time steps of the sequence's persistent kernels over the GPU (the
// wide-state kernels, wide/wide_kernels.cuh, and the tiled kernels,
// tiled/tiled_kernels.cuh): one per row of blocks, whose blocks read each step only rows of x
// that their own row wrote the step before.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lltm_ext::lltm {

// The barrier between steps, over one row of blocks (the blocks of one blockIdx.y: a step reads
// only rows of x that its own row of blocks wrote the step before). flags holds one counter per
// block (gridDim.x per row, zeroed before the launch): a block that finished writing its part of
// step k's x raises its own to k (arrive); a block about to read step k's x waits until every
// counter of its row has reached k (wait: thread i polls block i's, all in parallel). Unlike a
// grid barrier, no block waits for other rows, and no counter takes more than one writer.
// Ordering: the block's barrier (every thread's writes of the step ordered before thread 0's
// next operation, at block scope), then one release store by thread 0 at device scope; PTX's
// causality order is transitive, so the release carries the whole block's writes. No sequentially
// consistent __threadfence before it: a second, heavier fence on every step's critical path
// (docs/lltm_sequence_kernels.md#the-persistent-kernels-step).
// The waiting threads poll with relaxed loads (an acquire load per poll would order, and may
// invalidate L1, on every round) and, once they see the count, one acquire fence (PTX's acquire
// pattern: a strong read, then fence.acq_rel), then the block's barrier. The step counts wrap at
// 2^32: they are compared by their difference.
__device__ __forceinline__ void row_arrive(unsigned int* flags, unsigned int k) {
  __syncthreads();  // this block's writes of the step are done
  if (threadIdx.x == 0) {
    unsigned int* own = flags + static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(own), "r"(k) : "memory");
  }
}

__device__ __forceinline__ void row_wait(const unsigned int* flags, unsigned int k) {
  const unsigned int* row = flags + static_cast<int64_t>(blockIdx.y) * gridDim.x;
  for (unsigned int i = threadIdx.x; i < gridDim.x; i += blockDim.x) {
    unsigned int seen = 0;
    do {
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(row + i) : "memory");
    } while (static_cast<int>(seen - k) < 0);
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
  }
  __syncthreads();
}

}  // namespace lltm_ext::lltm
