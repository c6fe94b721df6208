// Python entry point of the compiled extension pyterrier_tite._C.
// The kernels register themselves as torch operators (namespace `tite`, see the other files in csrc/);
// importing this module loads them. The functions here only report how the module was built.
#include <torch/extension.h>

#include "window_simd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

bool built_with_openmp() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

const char* window_kernel_isa(bool sixteen_bit) {
  switch (tite_window::kernel_isa(sixteen_bit)) {
    case tite_window::Isa::kAvx512:
      return "avx512";
    case tite_window::Isa::kAvx2:
      return "avx2";
    default:
      return "baseline";
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "pyterrier_tite compiled kernels (registered as torch.ops.tite.*)";
  m.def("built_with_openmp", &built_with_openmp, "True when the CPU kernels use OpenMP");
  m.def("window_kernel_isa", &window_kernel_isa, "The window kernels' version for 16-bit (True) or other types");
}
