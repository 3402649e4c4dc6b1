// Converting a model's linear layers to a serving dtype in place
// (core/attention/linear_weights.h), and the linear entry points
// (core/attention/linear_rows.h) on the converted layers.
#include "core/attention/linear_weights.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/attention/linear_rows.h"
#include "kernels/int8_weight.h"

namespace performer {
namespace {

struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    a = register_module("a", torch::nn::Linear(40, 24));
    b = register_module("b", torch::nn::Linear(24, 8));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

// The float32 weights a converted layer computes with.
torch::Tensor Widened(const torch::nn::Linear& layer) {
  if (layer->weight.scalar_type() != torch::kChar) return layer->weight.to(torch::kFloat);
  const int64_t in = layer->weight.size(1);
  return layer->weight.to(torch::kFloat) *
         LinearWeightScales(*layer).repeat_interleave(32, 1).narrow(1, 0, in);
}

TEST(LinearWeightsTest, ConvertsInPlaceAndSharesMirroredWeights) {
  torch::manual_seed(1);
  TwoLayers model, mirror;
  torch::NoGradGuard no_grad;
  mirror.a->weight.set_data(model.a->weight);  // a mirrored layer shares the storage
  const torch::Tensor original = model.a->weight.clone();
  const kernels::Int8Weight expected = kernels::QuantizeInt8Weight(original);
  ConvertLinearWeights({&model, &mirror}, torch::kChar);
  for (TwoLayers* m : {&model, &mirror}) {
    EXPECT_EQ(m->a->weight.scalar_type(), torch::kChar);
    EXPECT_EQ(m->b->weight.scalar_type(), torch::kChar);
    EXPECT_EQ(m->a->named_parameters()["weight"].scalar_type(), torch::kChar);
  }
  EXPECT_EQ(model.a->weight.data_ptr(), mirror.a->weight.data_ptr());
  EXPECT_EQ(LinearWeightScales(*model.a).data_ptr(), LinearWeightScales(*mirror.a).data_ptr());
  EXPECT_NE(model.b->weight.data_ptr(), mirror.b->weight.data_ptr());
  EXPECT_TRUE(torch::equal(model.a->weight, expected.weight));
  EXPECT_TRUE(torch::equal(LinearWeightScales(*model.a), expected.scales));
  // Again in the same dtype: nothing changes; to another: refused.
  const void* before = model.a->weight.data_ptr();
  ConvertLinearWeights({&model}, torch::kChar);
  EXPECT_EQ(model.a->weight.data_ptr(), before);
  EXPECT_THROW(ConvertLinearWeights({&model}, torch::kBFloat16), c10::Error);
  ConvertLinearWeights({&model}, torch::kFloat);  // float32: nothing to do
  EXPECT_EQ(model.a->weight.scalar_type(), torch::kChar);
}

TEST(LinearWeightsTest, Bf16RoundsToNearestEven) {
  TwoLayers model;
  torch::NoGradGuard no_grad;
  const torch::Tensor original = model.a->weight.clone();
  ConvertLinearWeights({&model}, torch::kBFloat16);
  EXPECT_TRUE(torch::equal(model.a->weight, original.to(torch::kBFloat16)));
  EXPECT_FALSE(LinearWeightScales(*model.a).defined());
  const WeightMatrix copy = CompactWeight(original, torch::kFloat);
  EXPECT_EQ(copy.weight.data_ptr(), original.data_ptr());  // float32: the tensor itself
}

// Every entry point takes a converted layer and computes with its widened
// weights, at few rows (streamed) and many (widened for sgemm), in a 3-D
// forward too.
TEST(LinearWeightsTest, EntryPointsComputeWithTheCompactWeights) {
  torch::manual_seed(2);
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kChar}) {
    TwoLayers model;
    ConvertLinearWeights({&model}, dtype);
    torch::NoGradGuard no_grad;
    const torch::Tensor w = Widened(model.a);
    for (int64_t rows : {1, 3, 100}) {
      const torch::Tensor x = torch::randn({rows, 40});
      const torch::Tensor expected = torch::addmm(model.a->bias, x, w.t());
      SCOPED_TRACE(std::to_string(rows) + " rows");
      EXPECT_TRUE(torch::allclose(LinearRows(model.a, x), expected, 3e-2, 3e-2));
      EXPECT_TRUE(torch::allclose(ApplyLinear(model.a, x.view({1, rows, 40})),
                                  expected.view({1, rows, 24}), 3e-2, 3e-2));
      EXPECT_TRUE(torch::allclose(ForwardLinear(model.a, x), expected, 3e-2, 3e-2));
    }
  }
}

}  // namespace
}  // namespace performer
