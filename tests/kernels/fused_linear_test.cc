// FusedLinear on the CPU against the same computation as separate tensor
// ops (its definition): bit for bit with float32 weights, which take the
// skinny kernel as LinearRows does, and within bf16 or int8 rounding
// otherwise (int8 against its dequantized weights).
#include "kernels/fused_linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>

#include "kernels/cpu/weight_formats.h"
#include "kernels/int8_weight.h"
#include "kernels/skinny_linear.h"

namespace performer::kernels {
namespace {

struct Operands {
  torch::Tensor x, weight, bias, norm_weight, norm_bias, residual;
};

Operands MakeOperands(int64_t rows, int64_t in, int64_t out) {
  Operands o;
  o.x = torch::randn({rows, in});
  o.weight = torch::randn({out, in}) * 0.05;
  o.bias = torch::randn({out});
  o.norm_weight = 1.0 + 0.1 * torch::randn({in});
  o.norm_bias = 0.1 * torch::randn({in});
  o.residual = torch::randn({rows, out});
  return o;
}

// The separate ops: layer_norm, the skinny kernel with the given weights
// (float32), gelu, residual add.
torch::Tensor Reference(const Operands& o, const torch::Tensor& weight, bool norm, bool gelu,
                        bool residual) {
  torch::Tensor h =
      norm ? at::layer_norm(o.x, {o.x.size(1)}, o.norm_weight, o.norm_bias, 1e-5) : o.x;
  torch::Tensor y = SkinnyLinear(h.contiguous(), weight, o.bias);
  if (gelu) y = torch::gelu(y);
  return residual ? o.residual + y : y;
}

FusedLinearOptions Options(const Operands& o, bool norm, bool gelu, bool residual) {
  FusedLinearOptions f;
  f.bias = o.bias;
  if (norm) {
    f.norm_weight = o.norm_weight;
    f.norm_bias = o.norm_bias;
  }
  f.activation = gelu ? FusedActivation::kGelu : FusedActivation::kNone;
  if (residual) f.residual = o.residual;
  return f;
}

TEST(FusedLinearTest, Float32EqualsSeparateOpsBitForBit) {
  torch::manual_seed(3);
  for (int64_t rows : {1, 3, 8, 65}) {
    const Operands o = MakeOperands(rows, 96, 40);
    for (int mask = 0; mask < 8; ++mask) {
      const bool norm = mask & 1, gelu = mask & 2, residual = mask & 4;
      const torch::Tensor got = FusedLinear(o.x, o.weight, Options(o, norm, gelu, residual));
      EXPECT_TRUE(torch::equal(got, Reference(o, o.weight, norm, gelu, residual)))
          << "rows " << rows << " norm " << norm << " gelu " << gelu << " residual " << residual;
    }
  }
}

TEST(FusedLinearTest, Bf16WeightsMatchTheirFloat32ValuesWithinRounding) {
  torch::manual_seed(4);
  for (int64_t rows : {1, 5, 33}) {
    const Operands o = MakeOperands(rows, 128, 72);
    const torch::Tensor bf16 = o.weight.to(torch::kBFloat16);
    for (bool norm : {false, true}) {
      const torch::Tensor got = FusedLinear(o.x, bf16, Options(o, norm, true, true));
      // The same weights widened: only the bf16 path's rounding of x (at
      // most 2^-8 of each product) and its summation order remain.
      const torch::Tensor expected = Reference(o, bf16.to(torch::kFloat), norm, true, true);
      EXPECT_TRUE(torch::allclose(got, expected, 1e-2, 2e-2))
          << "rows " << rows << " max |diff| " << (got - expected).abs().max().item<float>();
      EXPECT_EQ(got.scalar_type(), torch::kFloat);
    }
  }
}

TEST(FusedLinearTest, Int8WeightsMatchTheirDequantizedValuesWithinRounding) {
  torch::manual_seed(6);
  for (int64_t rows : {1, 5, 33, 64}) {
    const Operands o = MakeOperands(rows, 100, 72);  // 100: a short last block
    const Int8Weight q = QuantizeInt8Weight(o.weight);
    FusedLinearOptions f = Options(o, true, true, true);
    f.weight_scales = q.scales;
    const torch::Tensor got = FusedLinear(o.x, q.weight, f);
    const torch::Tensor widened =
        q.weight.to(torch::kFloat) *
        q.scales.repeat_interleave(cpu::kInt8BlockSize, 1).narrow(1, 0, 100);
    // The AVX-512 path quantizes x per block of 32 (at most half a step of
    // the block's largest |x| / 127 each).
    const torch::Tensor expected = Reference(o, widened, true, true, true);
    EXPECT_TRUE(torch::allclose(got, expected, 3e-2, 3e-2))
        << "rows " << rows << " max |diff| " << (got - expected).abs().max().item<float>();
  }
}

// A prompt's many rows stream the compact weights too: each row within
// rounding of the widened weights' product, and (norm, product, residual)
// the same bits as that row alone, so a prefill's projections equal a decode
// step's.
TEST(FusedLinearTest, ManyRowsStreamTheCompactWeightsRowByRow) {
  torch::manual_seed(7);
  const int64_t rows = 301;
  const Operands o = MakeOperands(rows, 100, 300);
  const Int8Weight q = QuantizeInt8Weight(o.weight);
  const torch::Tensor bf16 = o.weight.to(torch::kBFloat16);
  const torch::Tensor int8_widened =
      q.weight.to(torch::kFloat) *
      q.scales.repeat_interleave(cpu::kInt8BlockSize, 1).narrow(1, 0, 100);
  for (bool int8 : {false, true}) {
    FusedLinearOptions f = Options(o, true, true, true);
    if (int8) f.weight_scales = q.scales;
    const torch::Tensor weight = int8 ? q.weight : bf16;
    const torch::Tensor got = FusedLinear(o.x, weight, f);
    const torch::Tensor expected =
        Reference(o, int8 ? int8_widened : bf16.to(torch::kFloat), true, true, true);
    EXPECT_TRUE(torch::allclose(got, expected, 3e-2, 3e-2))
        << "int8 " << int8 << " max |diff| " << (got - expected).abs().max().item<float>();
    FusedLinearOptions no_gelu = Options(o, true, false, true);
    no_gelu.weight_scales = f.weight_scales;
    const torch::Tensor all = FusedLinear(o.x, weight, no_gelu);
    const Operands one{o.x.narrow(0, 250, 1), o.weight,    o.bias,
                       o.norm_weight,         o.norm_bias, o.residual.narrow(0, 250, 1)};
    FusedLinearOptions g = Options(one, true, false, true);
    g.weight_scales = f.weight_scales;
    EXPECT_TRUE(torch::equal(FusedLinear(one.x, weight, g), all.narrow(0, 250, 1)))
        << "int8 " << int8;
  }
}

TEST(FusedLinearTest, Int8WeightsNeedTheirScales) {
  const torch::Tensor x = torch::randn({2, 40});
  const Int8Weight q = QuantizeInt8Weight(torch::randn({5, 40}));
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message([&] { FusedLinear(x, q.weight); }).find("int8 weights need weight_scales"),
            std::string::npos);
  FusedLinearOptions with_scales;
  with_scales.weight_scales = q.scales;
  EXPECT_NE(message([&] {
              FusedLinear(x, torch::randn({5, 40}), with_scales);
            }).find("weight_scales go with int8 weights only"),
            std::string::npos);
  with_scales.weight_scales = q.scales.narrow(1, 0, 1);
  EXPECT_NE(message([&] { FusedLinear(x, q.weight, with_scales); }).find("weight_scales must have"),
            std::string::npos);
  EXPECT_NE(message([] {
              QuantizeInt8Weight(torch::full({2, 3}, INFINITY));
            }).find("not finite"),
            std::string::npos);
}

TEST(FusedLinearTest, ARowDoesNotDependOnTheOthers) {
  torch::manual_seed(5);
  const Operands o = MakeOperands(24, 64, 48);
  const Int8Weight q = QuantizeInt8Weight(o.weight);
  for (const torch::Tensor& weight : {o.weight, o.weight.to(torch::kBFloat16), q.weight}) {
    FusedLinearOptions f = Options(o, true, true, true);
    if (weight.scalar_type() == torch::kChar) f.weight_scales = q.scales;
    const torch::Tensor all = FusedLinear(o.x, weight, f);
    const Operands one{o.x.narrow(0, 7, 1), o.weight,    o.bias,
                       o.norm_weight,       o.norm_bias, o.residual.narrow(0, 7, 1)};
    FusedLinearOptions g = Options(one, true, true, true);
    g.weight_scales = f.weight_scales;
    const torch::Tensor alone = FusedLinear(one.x, weight, g);
    EXPECT_TRUE(torch::equal(alone, all.narrow(0, 7, 1))) << weight.scalar_type();
  }
}

TEST(FusedLinearTest, EmptyBatchAndNoOptionalOperands) {
  const torch::Tensor weight = torch::randn({5, 8});
  EXPECT_EQ(FusedLinear(torch::zeros({0, 8}), weight).sizes(), (std::vector<int64_t>{0, 5}));
  const torch::Tensor x = torch::randn({2, 8});
  EXPECT_TRUE(torch::equal(FusedLinear(x, weight), SkinnyLinear(x, weight)));
}

TEST(FusedLinearTest, RefusesBadOperandsWithTheirNames) {
  const torch::Tensor x = torch::randn({2, 8}), weight = torch::randn({5, 8});
  auto refuses = [&](const torch::Tensor& xx, const torch::Tensor& w, FusedLinearOptions o,
                     const std::string& needle) {
    try {
      FusedLinear(xx, w, o);
      ADD_FAILURE() << "accepted; expected an error naming " << needle;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find(needle), std::string::npos)
          << e.what_without_backtrace();
    }
  };
  refuses(x, torch::randn({5, 7}), {}, "expected x (rows, in)");
  refuses(x, weight.to(torch::kDouble), {}, "float32 or bfloat16");
  refuses(x.to(torch::kDouble), weight, {}, "x must be float32");
  FusedLinearOptions bad_bias;
  bad_bias.bias = torch::zeros({4});
  refuses(x, weight, bad_bias, "bias must have 5");
  FusedLinearOptions bad_residual;
  bad_residual.residual = torch::zeros({3, 5});
  refuses(x, weight, bad_residual, "residual must have 10");
  FusedLinearOptions orphan;
  orphan.norm_bias = torch::zeros({8});
  refuses(x, weight, orphan, "norm_bias needs norm_weight");
}

}  // namespace
}  // namespace performer::kernels
