// Small products without cuBLAS's finest split-K (CUDA builds only): where cuBLAS's heuristic would
// cut K into pieces of a few elements, the product runs through cuBLASLt with split-K excluded.
//
// For products of a few dozen rows, cuBLAS (13) often picks a split-K kernel that cuts K into
// pieces of one to a dozen elements, several times slower than one unsplit kernel. Where cuBLAS's
// pick cut K into pieces shorter than kMinPieceDepth, the unsplit kernel was faster at almost all
// LLTM shapes measured and never much slower; where the pieces were longer, it was mostly slower,
// by far at worst. Figures: docs/decisions.md#cublaslt-min-piece-depth (more in
// docs/lltm_sequence_kernels.md).
#include <ATen/DynamicLibrary.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "common/env_setting.h"
#include "lltm_sequence/cublas_gemm.h"
#include "lltm_sequence/step_graphs.h"

namespace lltm_ext::lltm {
namespace {

// Split-K pieces of fewer K elements than this mean the unsplit product.
constexpr int64_t kMinPieceDepth = 16;
// Distinct products whose choice is kept (the map is emptied when it passes this).
constexpr size_t kMaxChoices = 4096;

// The cuBLASLt functions used here, from the libcublasLt that torch loaded (as Cublas in
// cublas_gemm.h); all null where it cannot be opened, and then every product stays with cuBLAS.
struct CublasLt {
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) algo_get = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;

  static const CublasLt& get() {
    static const CublasLt api = [] {
      CublasLt a;
      try {
        static at::DynamicLibrary lib(
            ("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)).c_str(), nullptr,
            /*leak_handle=*/true);
        const auto sym = [&](auto& fn, const char* name) {
          fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(lib.sym(name));
        };
        sym(a.desc_create, "cublasLtMatmulDescCreate");
        sym(a.desc_destroy, "cublasLtMatmulDescDestroy");
        sym(a.desc_set, "cublasLtMatmulDescSetAttribute");
        sym(a.layout_create, "cublasLtMatrixLayoutCreate");
        sym(a.layout_destroy, "cublasLtMatrixLayoutDestroy");
        sym(a.pref_create, "cublasLtMatmulPreferenceCreate");
        sym(a.pref_destroy, "cublasLtMatmulPreferenceDestroy");
        sym(a.pref_set, "cublasLtMatmulPreferenceSetAttribute");
        sym(a.heuristic, "cublasLtMatmulAlgoGetHeuristic");
        sym(a.algo_get, "cublasLtMatmulAlgoConfigGetAttribute");
        sym(a.matmul, "cublasLtMatmul");
      } catch (const c10::Error&) {
        a = CublasLt{};
      }
      return a;
    }();
    return api;
  }
};

// One product's cuBLASLt descriptors, destroyed with it: column-major C (m x n) = op_x(X) op_y(Y)
// + beta C.
class LtDescriptors {
 public:
  LtDescriptors(const CublasLt& lt, const LtProduct& p) : lt_(lt) {
    const cudaDataType_t scale = CUDA_R_32F;
    ok_ = lt.desc_create(&desc_, p.compute, scale) == CUBLAS_STATUS_SUCCESS;
    ok_ = ok_ && set(lt.desc_set, desc_, CUBLASLT_MATMUL_DESC_TRANSA, p.op_x);
    ok_ = ok_ && set(lt.desc_set, desc_, CUBLASLT_MATMUL_DESC_TRANSB, p.op_y);
    const bool tx = p.op_x != CUBLAS_OP_N, ty = p.op_y != CUBLAS_OP_N;
    ok_ = ok_ && layout(&x_, p.type, tx ? p.k : p.m, tx ? p.m : p.k, p.ld_x);
    ok_ = ok_ && layout(&y_, p.type, ty ? p.n : p.k, ty ? p.k : p.n, p.ld_y);
    ok_ = ok_ && layout(&c_, p.type, p.m, p.n, p.ld_c);
  }
  ~LtDescriptors() {
    for (cublasLtMatrixLayout_t l : {x_, y_, c_}) {
      if (l != nullptr) {
        lt_.layout_destroy(l);
      }
    }
    if (desc_ != nullptr) {
      lt_.desc_destroy(desc_);
    }
  }
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;

  bool ok() const { return ok_; }

  // The heuristic's first algorithm for this product with up to `workspace` bytes of workspace,
  // the reduction schemes in `schemes` and operands aligned to `align` bytes; false if none.
  bool first_algo(cublasLtHandle_t handle, uint64_t workspace, uint32_t schemes, uint32_t align,
                  cublasLtMatmulHeuristicResult_t* result) const {
    cublasLtMatmulPreference_t pref = nullptr;
    if (lt_.pref_create(&pref) != CUBLAS_STATUS_SUCCESS) {
      return false;
    }
    bool ok = set(lt_.pref_set, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace) &&
              set(lt_.pref_set, pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes);
    for (const auto a :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      ok = ok && set(lt_.pref_set, pref, a, align);
    }
    int found = 0;
    ok = ok && lt_.heuristic(handle, desc_, x_, y_, c_, c_, pref, 1, result, &found) ==
                   CUBLAS_STATUS_SUCCESS;
    lt_.pref_destroy(pref);
    return ok && found > 0 && result->state == CUBLAS_STATUS_SUCCESS;
  }

  void run(cublasLtHandle_t handle, const cublasLtMatmulAlgo_t& algo, const LtProduct& p,
           cudaStream_t stream) const {
    const float one = 1.0f;
    check_cublas(lt_.matmul(handle, desc_, &one, p.x, x_, p.y, y_, &p.beta, p.c, c_, p.c, c_, &algo,
                            nullptr, 0, stream),
                 "cublasLtMatmul");
  }

 private:
  template <typename Set, typename Obj, typename Attr, typename V>
  static bool set(Set fn, Obj obj, Attr attr, V value) {
    return fn(obj, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
  }
  bool layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, int64_t rows, int64_t cols,
              int64_t ld) const {
    return lt_.layout_create(l, type, rows, cols, ld) == CUBLAS_STATUS_SUCCESS;
  }

  const CublasLt& lt_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t x_ = nullptr, y_ = nullptr, c_ = nullptr;
  bool ok_ = false;
};

// The largest power of two up to 16 that divides the address of every operand.
uint32_t alignment(const LtProduct& p) {
  uint32_t a = 16;
  for (const void* ptr : {p.x, p.y, static_cast<const void*>(p.c)}) {
    while (reinterpret_cast<uintptr_t>(ptr) % a != 0) {
      a /= 2;
    }
  }
  return a;
}

// A product's choice: unsplit through cuBLASLt with `algo`, or cuBLAS as usual.
struct Choice {
  bool unsplit = false;
  cublasLtMatmulAlgo_t algo{};
};

using ChoiceKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int,
                             int, int, uint32_t, bool>;

Choice choose(const CublasLt& lt, cublasLtHandle_t handle, const LtDescriptors& d,
              const LtProduct& p, uint32_t align) {
  Choice choice;
  cublasLtMatmulHeuristicResult_t pick{};
  // What cuBLAS would run: the first pick with all reduction schemes and cuBLAS's workspace.
  if (!d.first_algo(handle, at::cuda::getChosenWorkspaceSize(), CUBLASLT_REDUCTION_SCHEME_MASK,
                    align, &pick)) {
    return choice;
  }
  uint32_t splits = 1;
  size_t written = 0;
  if (lt.algo_get(&pick.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written) !=
          CUBLAS_STATUS_SUCCESS ||
      splits <= 1 || p.k / splits >= kMinPieceDepth) {
    return choice;
  }
  cublasLtMatmulHeuristicResult_t unsplit{};
  if (d.first_algo(handle, 0, CUBLASLT_REDUCTION_SCHEME_NONE, align, &unsplit)) {
    choice.unsplit = true;
    choice.algo = unsplit.algo;
  }
  return choice;
}

// LLTM_EXT_CUBLAS_UNSPLIT (settings.h), read at every call: whether the rule above applies.
bool unsplit_setting() {
  return env_choice("LLTM_EXT_CUBLAS_UNSPLIT") != "off";
}

}  // namespace

bool gemm_unsplit(const LtProduct& p, cudaStream_t stream) {
  const CublasLt& lt = CublasLt::get();
  if (lt.matmul == nullptr || p.type == CUDA_R_64F || !unsplit_setting()) {
    return false;
  }
  const uint32_t align = alignment(p);
  const ChoiceKey key{static_cast<int>(c10::cuda::current_device()),
                      p.m,
                      p.n,
                      p.k,
                      p.ld_x,
                      p.ld_y,
                      p.ld_c,
                      static_cast<int>(p.op_x),
                      static_cast<int>(p.op_y),
                      static_cast<int>(p.type),
                      static_cast<int>(p.compute),
                      align,
                      p.beta != 0.0f};
  static std::mutex mutex;
  static std::map<ChoiceKey, Choice> choices;
  Choice choice;
  bool known = false;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = choices.find(key);
    if (it != choices.end()) {
      choice = it->second;
      known = true;
    }
  }
  if (known && !choice.unsplit) {
    return false;
  }
  // Not in a loop's capture (step_graphs.h): torch's cuBLASLt handle is its cuBLAS handle, and
  // fetching it would set that handle's stream back to the caller's mid-capture.
  if (step_capture_refuses()) {
    return false;
  }
  const cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  const LtDescriptors d(lt, p);
  if (!d.ok()) {
    return false;
  }
  if (!known) {
    choice = choose(lt, handle, d, p, align);
    const std::lock_guard<std::mutex> lock(mutex);
    if (choices.size() >= kMaxChoices) {
      choices.clear();
    }
    choices.emplace(key, choice);
  }
  if (!choice.unsplit) {
    return false;
  }
  d.run(handle, choice.algo, p, stream);
  return true;
}

}  // namespace lltm_ext::lltm
