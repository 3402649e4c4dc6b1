// The projection kernels of kernels/cuda/fused_linear_cuda.cu run on the
// host (cuda_emulation.h): the own kernel against the CPU op for each
// weight type, load path and epilogue, and a row's bits the same among any
// number of rows (what --cuda_same_bits rests on); the tensor-core kernel
// against the CPU op.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "kernels/fused_linear.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

namespace emulated = cuda_emulated;

struct Layer {
  torch::Tensor weight, bias, norm_weight, norm_bias;
  bool gelu = false;
};

Layer MakeLayer(int64_t in, int64_t out, torch::ScalarType dtype, bool norm, bool gelu) {
  torch::manual_seed(in * 131 + out);
  Layer l;
  l.weight = (torch::randn({out, in}) * 0.2).to(dtype).contiguous();
  l.bias = torch::randn({out});
  if (norm) {
    l.norm_weight = torch::rand({in}) + 0.5;
    l.norm_bias = torch::randn({in}) * 0.1;
  }
  l.gelu = gelu;
  return l;
}

// The layer on rows x (residual optional) by the emulated kernel.
torch::Tensor Emulated(const Layer& l, const torch::Tensor& x, const torch::Tensor& residual,
                       bool tensor_cores) {
  torch::Tensor y = torch::empty({x.size(0), l.weight.size(0)});
  emulated::FusedLinearArgs a{};
  a.weight_type = l.weight.scalar_type() == torch::kBFloat16 ? emulated::FusedWeightType::kBFloat16
                                                             : emulated::FusedWeightType::kFloat32;
  a.x = x.data_ptr<float>();
  a.weight = l.weight.data_ptr();
  a.bias = l.bias.data_ptr<float>();
  a.norm_weight = l.norm_weight.defined() ? l.norm_weight.data_ptr<float>() : nullptr;
  a.norm_bias = l.norm_bias.defined() ? l.norm_bias.data_ptr<float>() : nullptr;
  a.norm_eps = 1e-5f;
  a.gelu = l.gelu;
  a.residual = residual.defined() ? residual.data_ptr<float>() : nullptr;
  a.y = y.data_ptr<float>();
  a.rows = x.size(0), a.in = x.size(1), a.out = l.weight.size(0);
  const char* error = tensor_cores ? emulated::FusedLinearMmaForward(a, nullptr)
                                   : emulated::FusedLinearForward(a, nullptr);
  EXPECT_EQ(error, nullptr) << error;
  return y;
}

// The CPU op with the weights widened to float32: its bf16 path rounds x to
// bf16 on AVX-512 BF16 machines, which the kernels here do not.
torch::Tensor Cpu(const Layer& l, const torch::Tensor& x, const torch::Tensor& residual) {
  FusedLinearOptions o;
  o.bias = l.bias;
  o.norm_weight = l.norm_weight;
  o.norm_bias = l.norm_bias;
  o.norm_eps = 1e-5;
  o.activation = l.gelu ? FusedActivation::kGelu : FusedActivation::kNone;
  o.residual = residual;
  return FusedLinear(x, l.weight.to(torch::kFloat), o);
}

void ExpectClose(const torch::Tensor& got, const torch::Tensor& expected, double tolerance,
                 const std::string& what) {
  EXPECT_TRUE(torch::allclose(got, expected, tolerance, tolerance))
      << what << ": max |diff| " << (got - expected).abs().max().item<float>();
}

TEST(FusedLinearEmulationTest, TheOwnKernelMatchesTheCpuForEveryWeightTypeAndEpilogue) {
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    // in 64: 16-byte vectors; in 37: one element per lane.
    for (int64_t in : {int64_t{64}, int64_t{37}}) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool norm = variant >= 1, gelu = variant == 2;
        const std::string what = std::string(dtype == torch::kFloat ? "fp32" : "bf16") + " in " +
                                 std::to_string(in) + " variant " + std::to_string(variant);
        const Layer l = MakeLayer(in, 20, dtype, norm, gelu);
        const torch::Tensor x = torch::randn({5, in});
        const torch::Tensor residual = variant == 2 ? torch::randn({5, 20}) : torch::Tensor();
        ExpectClose(Emulated(l, x, residual, false), Cpu(l, x, residual), 1e-5, what);
      }
    }
  }
}

TEST(FusedLinearEmulationTest, ARowHasTheSameBitsAmongAnyNumberOfRows) {
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(dtype == torch::kFloat ? "fp32" : "bf16");
    const Layer l = MakeLayer(64, 12, dtype, /*norm=*/true, /*gelu=*/true);
    torch::manual_seed(3);
    // 300 rows: blocks of 8 rows; the parts below take blocks of 1, 2, 4
    // and 8, the rows at other places in their blocks.
    const torch::Tensor x = torch::randn({300, 64});
    const torch::Tensor all = Emulated(l, x, {}, false);
    for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{9}, int64_t{33}}) {
      const torch::Tensor part = x.narrow(0, 300 - rows, rows).contiguous();
      EXPECT_TRUE(torch::equal(Emulated(l, part, {}, false), all.narrow(0, 300 - rows, rows)))
          << rows << " rows";
    }
  }
}

TEST(FusedLinearEmulationTest, TheTensorCoreKernelMatchesTheCpu) {
  // 40 rows: a full and a partial tile of 32; out 48: a partial tile of 32.
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    const bool norm = variant >= 1, gelu = variant == 2;
    const Layer l = MakeLayer(96, 48, torch::kBFloat16, norm, gelu);
    const torch::Tensor x = torch::randn({40, 96});
    const torch::Tensor residual = variant == 2 ? torch::randn({40, 48}) : torch::Tensor();
    // x as hi + lo bfloat16 terms: about 16 bits of x, so 1e-4.
    ExpectClose(Emulated(l, x, residual, true), Cpu(l, x, residual), 1e-4, "tensor cores");
  }
}

TEST(FusedLinearEmulationTest, TheTensorCoreKernelRefusesShapesItDoesNotTake) {
  const Layer l = MakeLayer(40, 16, torch::kBFloat16, false, false);  // in 40: not % 16
  emulated::FusedLinearArgs a{};
  a.weight_type = emulated::FusedWeightType::kBFloat16;
  a.weight = l.weight.data_ptr();
  a.rows = 1, a.in = 40, a.out = 16;
  EXPECT_FALSE(emulated::FusedLinearMmaSupported(a));
  EXPECT_NE(emulated::FusedLinearMmaForward(a, nullptr), nullptr);
}

}  // namespace
}  // namespace performer::kernels
