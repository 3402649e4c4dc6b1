#include "core/runtime/torch_runtime.h"

#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace performer {
namespace {

// Finds the BLAS library in /proc/self/maps. Debian's alternatives system
// names every implementation libblas.so.3, so the directory tells which.
std::string MappedBlas() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::string found;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (absl::StrContains(path, "libopenblas") || absl::StrContains(path, "libmkl") ||
        absl::StrContains(path, "libblis")) {
      return path;
    }
    if (found.empty() && absl::StrContains(path, "libblas")) found = path;
  }
  return found.empty() ? "unknown" : found;
}

}  // namespace

TorchRuntimeInfo ConfigureTorchRuntime(int threads) {
  if (threads <= 0) threads = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (threads <= 0) threads = 1;
  torch::set_num_threads(threads);
  // Force a BLAS call so that lazily loaded BLAS libraries are mapped.
  (void)torch::mm(torch::ones({2, 2}), torch::ones({2, 2}));
  TorchRuntimeInfo info;
  info.intra_op_threads = torch::get_num_threads();
  info.blas_library = MappedBlas();
  // PyTorch's own builds (the pip wheels) link MKL into libtorch_cpu.so, so
  // no BLAS library is mapped on its own.
  const bool mkl_inside = info.blas_library == "unknown" && at::hasMKL();
  if (mkl_inside) info.blas_library = "MKL, linked into LibTorch";
  info.blas_is_optimized = mkl_inside || absl::StrContains(info.blas_library, "openblas") ||
                           absl::StrContains(info.blas_library, "mkl") ||
                           absl::StrContains(info.blas_library, "blis");
  return info;
}

std::string DescribeTorchRuntime(const TorchRuntimeInfo& info) {
  return absl::StrCat("LibTorch ", TORCH_VERSION, ", ", info.intra_op_threads,
                      " intra-op threads, BLAS ", info.blas_library,
                      info.blas_is_optimized ? " (optimized)" : " (reference BLAS: slow)");
}

}  // namespace performer
