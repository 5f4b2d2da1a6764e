// An element-wise op's input that is not dense, read in place as strided rows: element (r, c) of
// the tensor's row-major order at r * row_stride + c * col_stride (elementwise_binding.h finds the
// rows, elementwise_cuda.cuh's rows kernel reads them).
#pragma once

#include <cstdint>

namespace lltm_ext::elementwise {

// rows == 0: none (the input is dense, read in memory order).
struct StridedRows {
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 0;
};

}  // namespace lltm_ext::elementwise
