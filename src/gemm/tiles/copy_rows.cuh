// Row copies into a wider pitch: the wgmma GEMM's operand copies, whose rows must start 16 bytes
// apart for TMA at all and whole 32-byte sectors apart for TMA at full speed.
//
// Each thread moves one 16-byte chunk of a row per row it visits: one 16-byte load where the
// source rows are 16-byte aligned, else four 4-byte or eight 2-byte loads, then one 16-byte store
// (the destination's pitch is a multiple of 16 bytes). A row's last chunk, when shorter, goes in
// 2-byte pieces. Rows of few chunks share a block (lanes of a power of two per row), so short rows
// keep every thread busy; the grid's second dimension walks the rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lltm_ext::gemm_tiles {

inline constexpr int kCopyRowsThreads = 256;

// dst[r * dst_pitch + i] = src[r * src_pitch + i] for r < rows, i < row_bytes (all in bytes).
// dst is 16-byte aligned and dst_pitch a multiple of 16; src, src_pitch and row_bytes are
// multiples of LOAD (16, 4 or 2: the load width), except src_pitch where rows == 1. Each row is
// served by 2^lanes_log2 threads (at most kCopyRowsThreads), block x taking the row's 16-byte
// chunks [x * 2^lanes_log2, (x + 1) * 2^lanes_log2).
template <int LOAD>
__global__ void __launch_bounds__(kCopyRowsThreads)
    copy_rows_kernel(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                     int64_t rows, int64_t row_bytes, int64_t src_pitch, int64_t dst_pitch,
                     int lanes_log2) {
  static_assert(LOAD == 16 || LOAD == 4 || LOAD == 2, "16-, 4- or 2-byte loads");
  const int lanes = 1 << lanes_log2;
  const int64_t offset =
      (static_cast<int64_t>(blockIdx.x) * lanes + (threadIdx.x & (lanes - 1))) * 16;
  if (offset >= row_bytes) return;  // no barriers below: threads past the row leave now
  const int64_t bytes = row_bytes - offset < 16 ? row_bytes - offset : 16;
  const int64_t rows_per_block = kCopyRowsThreads >> lanes_log2;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * rows_per_block;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * rows_per_block + (threadIdx.x >> lanes_log2);
       r < rows; r += row_step) {
    const unsigned char* const s = src + r * src_pitch + offset;
    unsigned char* const d = dst + r * dst_pitch + offset;
    if (bytes == 16) {
      uint4 v;
      if constexpr (LOAD == 16) {
        v = __ldg(reinterpret_cast<const uint4*>(s));
      } else if constexpr (LOAD == 4) {
        const unsigned int* const w = reinterpret_cast<const unsigned int*>(s);
        v = make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
      } else {
        const unsigned short* const h = reinterpret_cast<const unsigned short*>(s);
        unsigned int w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          w[j] = static_cast<unsigned int>(__ldg(h + 2 * j)) |
                 (static_cast<unsigned int>(__ldg(h + 2 * j + 1)) << 16);
        }
        v = make_uint4(w[0], w[1], w[2], w[3]);
      }
      *reinterpret_cast<uint4*>(d) = v;
    } else {
      const unsigned short* const h = reinterpret_cast<const unsigned short*>(s);
      for (int64_t j = 0; j < bytes / 2; ++j)
        reinterpret_cast<unsigned short*>(d)[j] = __ldg(h + j);
    }
  }
}

}  // namespace lltm_ext::gemm_tiles
