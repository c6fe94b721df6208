// Python entry point of the compiled extension pyterrier_tite._C.
// The kernels register themselves as torch operators (namespace `tite`, see the other files in csrc/);
// importing this module loads them. The functions here only report how the module was built.
#include <torch/extension.h>

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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "pyterrier_tite compiled kernels (registered as torch.ops.tite.*)";
  m.def("built_with_openmp", &built_with_openmp, "True when the CPU kernels use OpenMP");
}
