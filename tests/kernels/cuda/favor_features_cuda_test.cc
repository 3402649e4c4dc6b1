// CUDA FAVOR+ feature maps against the CPU kernel (its reference).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/favor_features.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

struct FavorShape {
  int64_t b, h, l, d, m;
};

class FavorFeaturesCudaTest : public ::testing::TestWithParam<FavorShape> {};

void ExpectClose(const torch::Tensor& got, const torch::Tensor& expected, double rtol, double atol,
                 const char* what) {
  const torch::Tensor g = got.cpu().to(torch::kFloat);
  EXPECT_TRUE(torch::allclose(g, expected, rtol, atol))
      << what << ": max |diff| " << (g - expected).abs().max().item<float>();
}

TEST_P(FavorFeaturesCudaTest, Float32MatchesCpuKernel) {
  PERFORMER_REQUIRE_CUDA();
  const FavorShape s = GetParam();
  torch::manual_seed(51);
  const torch::Tensor data = torch::randn({s.b, s.h, s.l, s.d});
  const torch::Tensor projection = torch::randn({s.m, s.d});
  const torch::Tensor gpu_data = data.cuda(), gpu_projection = projection.cuda();
  for (bool is_query : {true, false}) {
    const torch::Tensor expected = SoftmaxKernelFeatures(data, projection, is_query);
    const torch::Tensor got = SoftmaxKernelFeatures(gpu_data, gpu_projection, is_query);
    EXPECT_EQ(got.sizes(), expected.sizes());
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    ExpectClose(got, expected, 1e-4, 1e-6, is_query ? "query" : "key");
  }
  ExpectClose(GeneralizedKernelFeatures(gpu_data, gpu_projection),
              GeneralizedKernelFeatures(data, projection), 1e-4, 1e-5, "generalized");
}

TEST_P(FavorFeaturesCudaTest, HalfTypesAccumulateInFloat32) {
  PERFORMER_REQUIRE_CUDA();
  const FavorShape s = GetParam();
  torch::manual_seed(52);
  for (torch::ScalarType dtype : {torch::kHalf, torch::kBFloat16}) {
    // Inputs representable in the half type, so only the output rounding
    // and the fp32 summation order differ from the float32 CPU kernel.
    const torch::Tensor data = torch::randn({s.b, s.h, s.l, s.d}).to(dtype);
    const torch::Tensor projection = torch::randn({s.m, s.d}).to(dtype);
    const double rtol = dtype == torch::kHalf ? 2e-3 : 1.6e-2;
    for (bool is_query : {true, false}) {
      const torch::Tensor expected =
          SoftmaxKernelFeatures(data.to(torch::kFloat), projection.to(torch::kFloat), is_query);
      const torch::Tensor got = SoftmaxKernelFeatures(data.cuda(), projection.cuda(), is_query);
      EXPECT_EQ(got.scalar_type(), dtype);
      ExpectClose(got, expected, rtol, 1e-5, is_query ? "query" : "key");
    }
    const torch::Tensor got = GeneralizedKernelFeatures(data.cuda(), projection.cuda());
    ExpectClose(got,
                GeneralizedKernelFeatures(data.to(torch::kFloat), projection.to(torch::kFloat)),
                rtol, 1e-3, "generalized");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FavorFeaturesCudaTest,
                         ::testing::Values(FavorShape{1, 1, 1, 1, 1}, FavorShape{2, 3, 7, 5, 11},
                                           FavorShape{1, 2, 33, 17, 19},
                                           FavorShape{2, 4, 129, 64, 266},
                                           FavorShape{1, 8, 1000, 64, 256}));

}  // namespace
}  // namespace performer::kernels
