// The FAVOR+ feature-map kernels of kernels/cuda/favor_features_cuda.cu run
// on the host (cuda_emulation.h): the softmax query and key maps and the
// generalized ReLU map, in float32, bfloat16 and float16, against the CPU op.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "kernels/favor_features.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"
#include "tests/testing/scaled_error.h"

namespace performer::kernels {
namespace {

namespace emulated = cuda_emulated;

// The emulated map of data (G, L, D) with projection (M, D): (G, L, M) of
// data's dtype.
torch::Tensor Emulated(const torch::Tensor& data, const torch::Tensor& projection,
                       emulated::FavorMapKind map, double eps) {
  const int64_t groups = data.size(0), length = data.size(1), dims = data.size(2);
  const int64_t features = projection.size(0), rows = groups * length;
  emulated::FavorFeaturesArgs a{};
  a.dtype = data.scalar_type() == torch::kFloat      ? emulated::FavorDtype::kFloat32
            : data.scalar_type() == torch::kBFloat16 ? emulated::FavorDtype::kBFloat16
                                                     : emulated::FavorDtype::kFloat16;
  a.map = map;
  torch::Tensor out = torch::empty({groups, length, features}, data.options());
  torch::Tensor u = torch::empty({rows, features});
  torch::Tensor diag = torch::empty({rows}), stabiliser = torch::empty({rows});
  a.data = data.data_ptr();
  a.projection = projection.data_ptr();
  a.u = u.data_ptr<float>();
  a.diag = diag.data_ptr<float>();
  a.stabiliser = stabiliser.data_ptr<float>();
  a.out = out.data_ptr();
  a.groups = groups, a.length = length, a.dims = dims, a.features = features;
  a.eps = static_cast<float>(eps);
  const char* error = emulated::FavorFeaturesForward(a, nullptr);
  EXPECT_EQ(error, nullptr) << error;
  return out;
}

TEST(FavorFeaturesEmulationTest, EachMapMatchesTheCpuInEachDtype) {
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    // L 37, D 40, M 70: ragged tiles in every dimension.
    torch::manual_seed(13);
    const torch::Tensor data = (torch::randn({3, 37, 40}) * 0.7).to(dtype);
    const torch::Tensor projection = torch::randn({70, 40}).to(dtype);
    const torch::Tensor x = data.to(torch::kFloat), p = projection.to(torch::kFloat);
    const double tolerance = dtype == torch::kFloat ? 1e-5 : 2e-2;
    const std::string name = dtype == torch::kFloat      ? "fp32"
                             : dtype == torch::kBFloat16 ? "bf16"
                                                         : "fp16";
    struct Map {
      emulated::FavorMapKind kind;
      torch::Tensor expected;
      const char* name;
    };
    const Map maps[] = {
        {emulated::FavorMapKind::kSoftmaxQuery, SoftmaxKernelFeatures(x, p, true, 1e-4), "query"},
        {emulated::FavorMapKind::kSoftmaxKey, SoftmaxKernelFeatures(x, p, false, 1e-4), "key"},
        {emulated::FavorMapKind::kGeneralizedRelu, GeneralizedKernelFeatures(x, p, 1e-3), "relu"},
    };
    for (const Map& map : maps) {
      SCOPED_TRACE(name + " " + map.name);
      const double eps = map.kind == emulated::FavorMapKind::kGeneralizedRelu ? 1e-3 : 1e-4;
      const torch::Tensor got = Emulated(data, projection, map.kind, eps).to(torch::kFloat);
      EXPECT_LT(testing::ScaledError(got, map.expected), tolerance);
    }
  }
}

}  // namespace
}  // namespace performer::kernels
