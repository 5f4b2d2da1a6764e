// The sequence's tiled kernels (tiled/tiled_kernels.cuh), host side: the tile shape of a batch
// and state on the device (the planner's facts, plan_cuda_host.cpp), whether the
// device runs their sm_90 code, and the cooperative launches.
#include <cstdint>
#include <type_traits>

#include "common/cuda_kernel.cuh"
#include "lltm_sequence/sequence_launchers.h"
#include "lltm_sequence/tiled/tiled_kernels.cuh"

namespace lltm_ext::lltm {
namespace {

// f(forward kernel, backward kernel) for T and the product: three TF32 passes for float32 only,
// one pass for float32 and the half types; none for float64 (cudaErrorNotSupported).
template <typename T, typename F>
cudaError_t with_tiled_kernels(Product product, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (product == Product::kTf32x3) {
      return f(tiled_forward_kernel<T, Product::kTf32x3>,
               tiled_backward_kernel<T, Product::kTf32x3>);
    }
  }
  if constexpr (std::is_same_v<cuda::opmath_t<T>, float>) {
    if (product == Product::kTf32) {
      return f(tiled_forward_kernel<T, Product::kTf32>, tiled_backward_kernel<T, Product::kTf32>);
    }
  }
  return cudaErrorNotSupported;
}

size_t tiled_smem_bytes(int64_t state, const TiledShape& shape, bool backward) {
  const int k = static_cast<int>(backward ? 3 * state : state);
  const int n_out = backward ? shape.cols : 3 * shape.cols;
  return static_cast<size_t>(tiled_smem_floats(k, n_out, shape.mt, shape.stages)) * sizeof(float);
}

dim3 tiled_grid(int64_t batch, int64_t state, const TiledShape& shape) {
  return dim3(static_cast<unsigned int>((state + shape.cols - 1) / shape.cols),
              static_cast<unsigned int>((batch + 16 * shape.mt - 1) / (16 * shape.mt)));
}

// What a step of `shape` costs a block, in units of one n-tile's k steps over the state: forward
// 3 cols outputs over K = S, backward cols over 3S, each n-tile of eight outputs, plus what every
// m-tile costs apart from its n-tiles (its fragments of x read from L2 through the ring, and split:
// kTiledRowCost n-tiles' worth per k), times the m-tiles. An estimate to rank shapes by; the
// measurements behind it are in docs/lltm_sequence_kernels.md.
constexpr int kTiledRowCost = 2;
int64_t tiled_cost(const TiledShape& shape) {
  const int forward_tiles = (3 * shape.cols + 7) / 8, backward_tiles = (shape.cols + 7) / 8;
  return static_cast<int64_t>(shape.mt) * (forward_tiles + 3 * backward_tiles + 4 * kTiledRowCost);
}

}  // namespace

// The kernels' code is compiled for sm_90 only (elsewhere they trap): the device must run an sm_90
// image of this module (the planner's rule was measured there), not a newer one nor PTX of an
// older.
template <typename T>
cudaError_t tiled_image_loaded(bool* loaded) {
  *loaded = false;
  if constexpr (std::is_same_v<cuda::opmath_t<T>, float>) {
    return cuda::image_compiled_for(tiled_forward_kernel<T, Product::kTf32>, 90, loaded, 90);
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t tiled_step_shape(int64_t batch, int64_t state, int sm_count, int max_smem,
                             Product product, int only_mt, int only_cols, int only_stages,
                             TiledShape* shape) {
  *shape = TiledShape{};
  if (batch < 1 || state < 1 || state > kTiledMaxState || product == Product::kSimt) {
    return cudaSuccess;
  }
  bool cooperative = false;
  cudaError_t err = cuda::cooperative_launch_supported(&cooperative);
  if (err != cudaSuccess || !cooperative) {
    return err;
  }
  // Blocks per SM that the kernels run at once with `smem` bytes (at most one: 256 threads of up to
  // 255 registers), with their shared-memory limit raised to the device's.
  int per_sm[2] = {0, 0};
  err = with_tiled_kernels<T>(product, [&](auto forward, auto backward) {
    cudaError_t e =
        cudaFuncSetAttribute(forward, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(backward, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
    }
    if (e == cudaSuccess) {
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm[0], forward, kTiledThreads, 0);
    }
    if (e == cudaSuccess) {
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm[1], backward, kTiledThreads, 0);
    }
    return e;
  });
  if (err == cudaErrorNotSupported) {
    (void)cudaGetLastError();
    return cudaSuccess;
  }
  if (err != cudaSuccess) {
    return err;
  }
  const int64_t resident = static_cast<int64_t>(per_sm[0] < per_sm[1] ? per_sm[0] : per_sm[1]);
  TiledShape best{};
  int64_t best_cost = 0, best_blocks = 0;
  for (const int mt : {1, 2, 4, 8}) {
    if (only_mt != 0 && mt != only_mt) {
      continue;
    }
    for (int cols = kTiledMinCols; cols <= kTiledMaxCols; ++cols) {
      if ((only_cols != 0 && cols != only_cols) ||
          16 * mt * cols > kTiledElements * kTiledThreads) {
        continue;
      }
      // three stages where they fit, else two (only_stages alone where given)
      const int most = only_stages != 0 ? only_stages : 3, least = only_stages != 0 ? most : 2;
      for (int stages = most; stages >= least; --stages) {
        const TiledShape s{mt, cols, stages};
        const dim3 grid = tiled_grid(batch, state, s);
        const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y;
        // One block per SM at most (its slice and ring take most of an SM's shared memory).
        if (blocks > sm_count || blocks > resident * sm_count ||
            tiled_smem_bytes(state, s, false) > static_cast<size_t>(max_smem) ||
            tiled_smem_bytes(state, s, true) > static_cast<size_t>(max_smem)) {
          continue;
        }
        const int64_t cost = tiled_cost(s);
        if (best.mt == 0 || cost < best_cost || (cost == best_cost && blocks < best_blocks)) {
          best = s;
          best_cost = cost;
          best_blocks = blocks;
        }
        break;
      }
    }
  }
  *shape = best;
  return cudaSuccess;
}

int64_t tiled_flag_count(int64_t batch, int64_t state, const TiledShape& shape) {
  const dim3 grid = tiled_grid(batch, state, shape);
  return static_cast<int64_t>(grid.x) * grid.y;
}

int64_t tiled_x_ld(int64_t state, bool backward) {
  return ((backward ? 3 * state : state) + 3) / 4 * 4;
}

namespace {

// Zeroes the step counters, then launches the kernel that `pick` takes from the forward and
// backward kernels cooperatively (the row barriers need every block resident at once: a
// cooperative launch fails rather than hang where they would not be).
template <typename T, typename Pick>
cudaError_t launch_tiled(Pick pick, bool backward, int64_t batch, int64_t state,
                         const TiledShape& shape, Product product, unsigned int* flags,
                         void** params, cudaStream_t stream) {
  const cudaError_t err = cudaMemsetAsync(
      flags, 0, static_cast<size_t>(tiled_flag_count(batch, state, shape)) * sizeof(*flags),
      stream);
  if (err != cudaSuccess) {
    return err;
  }
  return with_tiled_kernels<T>(product, [&](auto forward, auto backward_kernel) {
    return cudaLaunchCooperativeKernel(pick(forward, backward_kernel),
                                       tiled_grid(batch, state, shape), dim3(kTiledThreads), params,
                                       tiled_smem_bytes(state, shape, backward), stream);
  });
}

}  // namespace

template <typename T>
cudaError_t launch_tiled_forward(T* gates, const T* bias, const T* c0, const T* w, int64_t ld,
                                 T* output, T* cells, float* xbuf, unsigned int* flags,
                                 int64_t batch, int64_t state, int64_t steps,
                                 const TiledShape& shape, Product product, cudaStream_t stream) {
  int state_arg = static_cast<int>(state);
  TiledShape shape_arg = shape;
  void* params[] = {&gates, &bias,  &c0,    &w,         &ld,    &output,   &cells,
                    &xbuf,  &flags, &batch, &state_arg, &steps, &shape_arg};
  const auto pick = [](auto forward, auto) { return reinterpret_cast<void*>(forward); };
  return launch_tiled<T>(pick, false, batch, state, shape, product, flags, params, stream);
}

template <typename T>
cudaError_t launch_tiled_backward(T* d_gates, const T* w, int64_t ld, const T* grad_output,
                                  const T* grad_h_n, const T* grad_c_n, const T* cells,
                                  const T* gates, const T* bias, T* d_cell, float* xbuf,
                                  unsigned int* flags, int64_t batch, int64_t state, int64_t steps,
                                  const TiledShape& shape, Product product, cudaStream_t stream) {
  int state_arg = static_cast<int>(state);
  TiledShape shape_arg = shape;
  void* params[] = {&d_gates, &w,         &ld,    &grad_output, &grad_h_n, &grad_c_n,
                    &cells,   &gates,     &bias,  &d_cell,      &xbuf,     &flags,
                    &batch,   &state_arg, &steps, &shape_arg};
  const auto pick = [](auto, auto backward) { return reinterpret_cast<void*>(backward); };
  return launch_tiled<T>(pick, true, batch, state, shape, product, flags, params, stream);
}

#define LLTM_EXT_INSTANTIATE(T)                                                                   \
  template cudaError_t tiled_image_loaded<T>(bool*);                                              \
  template cudaError_t tiled_step_shape<T>(int64_t, int64_t, int, int, Product, int, int, int,    \
                                           TiledShape*);                                          \
  template cudaError_t launch_tiled_forward<T>(T*, const T*, const T*, const T*, int64_t, T*, T*, \
                                               float*, unsigned int*, int64_t, int64_t, int64_t,  \
                                               const TiledShape&, Product, cudaStream_t);         \
  template cudaError_t launch_tiled_backward<T>(                                                  \
      T*, const T*, int64_t, const T*, const T*, const T*, const T*, const T*, const T*, T*,      \
      float*, unsigned int*, int64_t, int64_t, int64_t, const TiledShape&, Product, cudaStream_t);
LLTM_EXT_FOR_FLOATING_TYPES(LLTM_EXT_INSTANTIATE)

}  // namespace lltm_ext::lltm
