// RandomFourierFeatures, SmoothedRandomFourierFeatures, Favor and
// GeneralizedRandomFeatures: shapes and defaults, the sampling rules
// (redraw, deterministic_eval, frozen, orthogonal blocks), kernel
// approximation and autograd.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/feature_maps/favor.h"
#include "core/feature_maps/generalized_random_features.h"
#include "core/feature_maps/random_fourier_features.h"

namespace performer {
namespace {

constexpr int64_t kE = 8;

TEST(RandomFourierFeatures, OmegaShapeOutputSizeAndDefaults) {
  RandomFourierFeaturesImpl rff(kE, RandomFourierFeaturesOptions().n_dims(16));
  EXPECT_EQ(rff.omega().sizes(), (std::vector<int64_t>{kE, 8}));
  EXPECT_EQ(rff.output_dims(), 16);
  EXPECT_DOUBLE_EQ(rff.softmax_temp(), 1.0 / std::sqrt(8.0));
  EXPECT_FALSE(rff.orthogonal());
  EXPECT_EQ(rff.redraw(), 1);
  EXPECT_FALSE(rff.deterministic_eval());
  EXPECT_EQ(rff.class_name(), "RandomFourierFeatures");

  // n_dims unset or 0 -> E; odd n_dims -> floor(n/2) columns.
  EXPECT_EQ(RandomFourierFeaturesImpl(kE).omega().sizes(), (std::vector<int64_t>{kE, 4}));
  EXPECT_EQ(RandomFourierFeaturesImpl(kE, RandomFourierFeaturesOptions().n_dims(0)).n_dims(), kE);
  RandomFourierFeaturesImpl odd(kE, RandomFourierFeaturesOptions().n_dims(7));
  EXPECT_EQ(odd.omega().size(1), 3);
  EXPECT_EQ(odd.output_dims(), 6);
  // A temperature of 0 stays 0 (no "or" for feature maps).
  EXPECT_EQ(RandomFourierFeaturesImpl(kE, RandomFourierFeaturesOptions().softmax_temp(0.0))
                .softmax_temp(),
            0.0);
}

TEST(RandomFourierFeatures, OmegaIsAZeroFloatBufferUntilSampled) {
  RandomFourierFeaturesImpl rff(kE, RandomFourierFeaturesOptions().n_dims(6));
  auto buffers = rff.named_buffers();
  ASSERT_EQ(buffers.size(), 1u);
  ASSERT_NE(buffers.find("omega"), nullptr);
  EXPECT_EQ(buffers["omega"].scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(buffers["omega"], torch::zeros({kE, 3})));
  EXPECT_TRUE(rff.parameters().empty());

  rff.new_feature_map(torch::kCPU);
  // The registered buffer is updated, not replaced by another tensor.
  auto after = rff.named_buffers();
  EXPECT_EQ(after["omega"].data_ptr(), rff.omega().data_ptr());
  EXPECT_GT(rff.omega().abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(rff.omega().scalar_type(), torch::kFloat);
}

TEST(RandomFourierFeatures, ForwardMatchesTheFormulaWithOddNDims) {
  RandomFourierFeaturesImpl rff(kE, RandomFourierFeaturesOptions().n_dims(7).softmax_temp(0.3));
  torch::manual_seed(1);
  rff.new_feature_map(torch::kCPU);
  const torch::Tensor x = torch::randn({2, 5, 3, kE});
  const torch::Tensor u = torch::matmul(x * std::sqrt(0.3), rff.omega());
  const torch::Tensor expected = torch::cat({u.cos(), u.sin()}, -1) * std::sqrt(2.0 / 7.0);
  EXPECT_TRUE(torch::allclose(rff.forward(x), expected, 1e-5, 1e-6));
}

TEST(SmoothedRandomFourierFeatures, UsesNDimsMinusOneAndAppendsTheConstant) {
  SmoothedRandomFourierFeaturesImpl smoothed(
      kE, SmoothedRandomFourierFeaturesOptions().n_dims(17).smoothing(0.5));
  EXPECT_EQ(smoothed.n_dims(), 16);
  EXPECT_EQ(smoothed.omega().sizes(), (std::vector<int64_t>{kE, 8}));
  EXPECT_EQ(smoothed.output_dims(), 17);
  EXPECT_EQ(smoothed.class_name(), "SmoothedRandomFourierFeatures");
  ASSERT_TRUE(smoothed.attribute("smoothing").has_value());
  EXPECT_EQ(smoothed.attribute("smoothing")->as_float(), 0.5);

  // Default n_dims: E - 1 = 7 -> 3 columns, 7 features.
  SmoothedRandomFourierFeaturesImpl by_default(kE);
  EXPECT_EQ(by_default.omega().size(1), 3);
  EXPECT_EQ(by_default.output_dims(), 7);
  EXPECT_EQ(by_default.smoothing(), 1.0);
  // n_dims 1 -> n' 0 -> `0 or E`.
  EXPECT_EQ(SmoothedRandomFourierFeaturesImpl(kE, SmoothedRandomFourierFeaturesOptions().n_dims(1))
                .n_dims(),
            kE);

  torch::manual_seed(2);
  smoothed.new_feature_map(torch::kCPU);
  const torch::Tensor x = torch::randn({2, 4, 2, kE});
  const torch::Tensor phi = smoothed.forward(x);
  EXPECT_EQ(phi.sizes(), (std::vector<int64_t>{2, 4, 2, 17}));
  EXPECT_TRUE(torch::equal(phi.select(-1, 16), torch::full({2, 4, 2}, 0.5)));
  EXPECT_TRUE(torch::equal(phi.narrow(-1, 0, 16), smoothed.RandomFourierFeaturesImpl::forward(x)));
}

TEST(Favor, DefaultsAndForwardFormula) {
  FavorImpl favor(kE, FavorOptions().n_dims(24).softmax_temp(0.25));
  EXPECT_TRUE(favor.orthogonal());
  EXPECT_FALSE(favor.stabilize());
  EXPECT_EQ(favor.omega().sizes(), (std::vector<int64_t>{kE, 12}));
  EXPECT_EQ(favor.output_dims(), 24);
  EXPECT_DOUBLE_EQ(FavorImpl(kE).softmax_temp(), 1.0 / std::sqrt(8.0));

  torch::manual_seed(3);
  favor.new_feature_map(torch::kCPU);
  const torch::Tensor x = torch::randn({2, 5, 3, kE});
  const torch::Tensor xs = x * 0.5;
  const torch::Tensor u = torch::matmul(xs, favor.omega());
  const torch::Tensor offset = 0.5 * (xs * xs).sum(-1, true) + 0.5 * std::log(24.0);
  const torch::Tensor expected = torch::cat({(u - offset).exp(), (-u - offset).exp()}, -1);
  EXPECT_TRUE(torch::allclose(favor.forward(x), expected, 1e-5, 1e-7));
}

TEST(Favor, StabilizeDividesEachSequenceByItsMaxNorm) {
  FavorImpl plain(kE, FavorOptions().n_dims(16));
  FavorImpl stable(kE, FavorOptions().n_dims(16).stabilize(true));
  torch::manual_seed(4);
  plain.new_feature_map(torch::kCPU);
  stable.omega().copy_(plain.omega());
  const torch::Tensor x = torch::randn({2, 6, 3, kE}) * 2;
  const torch::Tensor xs = x * std::sqrt(plain.softmax_temp());
  // Max over axis 1 (the sequence), separately per sample and head.
  const torch::Tensor max_norm = std::get<0>((xs * xs).sum(-1, true).max(1, true));
  EXPECT_TRUE(
      torch::allclose(stable.forward(x), plain.forward(x) * torch::exp(-max_norm), 1e-5, 1e-10));
  // Recurrent (N, H, E) inputs take the max over the heads; (N, E) is rejected.
  const torch::Tensor step = torch::randn({2, 3, kE});
  EXPECT_EQ(stable.forward(step).sizes(), (std::vector<int64_t>{2, 3, 16}));
  EXPECT_THROW(stable.forward(torch::randn({2, kE})), c10::Error);
}

TEST(GeneralizedRandomFeatures, OmegaHasNDimsColumnsAndTemperatureOneIsNotApplied) {
  GeneralizedRandomFeaturesImpl grf(kE, GeneralizedRandomFeaturesOptions().n_dims(12));
  EXPECT_EQ(grf.omega().sizes(), (std::vector<int64_t>{kE, 12}));
  EXPECT_EQ(grf.output_dims(), 12);
  EXPECT_EQ(grf.n_dims(), 24);  // The Python attribute is the doubled size.
  EXPECT_EQ(grf.softmax_temp(), 1.0);
  EXPECT_TRUE(grf.orthogonal());
  EXPECT_EQ(grf.kernel_fn().name, "relu");
  EXPECT_EQ(GeneralizedRandomFeaturesImpl(kE).omega().sizes(), (std::vector<int64_t>{kE, kE}));
  // softmax_temp explicitly unset falls back to the parent's 1/sqrt(E).
  EXPECT_DOUBLE_EQ(GeneralizedRandomFeaturesImpl(
                       kE, GeneralizedRandomFeaturesOptions().softmax_temp(std::nullopt))
                       .softmax_temp(),
                   1.0 / std::sqrt(8.0));

  torch::manual_seed(5);
  grf.new_feature_map(torch::kCPU);
  const torch::Tensor x = torch::randn({2, 3, 2, kE});
  EXPECT_TRUE(torch::allclose(grf.forward(x), torch::relu(torch::matmul(x, grf.omega()))));

  GeneralizedRandomFeaturesImpl scaled(
      kE, GeneralizedRandomFeaturesOptions().n_dims(12).softmax_temp(0.5).kernel_fn(
              *ActivationByName("identity")));
  scaled.omega().copy_(grf.omega());
  EXPECT_TRUE(torch::allclose(scaled.forward(x), torch::matmul(x * std::sqrt(0.5), grf.omega()),
                              1e-5, 1e-6));
}

// With many features the estimator's mean approaches the kernel.
TEST(Favor, ApproximatesTheSoftmaxKernel) {
  constexpr int64_t kFeatures = 2 * 8192;
  const double t = 0.5;
  FavorImpl favor(kE, FavorOptions().n_dims(kFeatures).softmax_temp(t));
  torch::manual_seed(6);
  favor.new_feature_map(torch::kCPU);
  const torch::Tensor q = torch::randn({16, kE}) * 0.4;
  const torch::Tensor k = torch::randn({16, kE}) * 0.4;
  const torch::Tensor estimate = (favor.forward(q) * favor.forward(k)).sum(-1);
  const torch::Tensor exact = torch::exp(t * (q * k).sum(-1));
  const double worst = ((estimate - exact).abs() / exact).max().item<double>();
  EXPECT_LT(worst, 0.03);

  // Few features: a visibly worse estimate, so the check above is not vacuous.
  FavorImpl coarse(kE, FavorOptions().n_dims(4).softmax_temp(t).orthogonal(false));
  coarse.new_feature_map(torch::kCPU);
  const torch::Tensor rough = (coarse.forward(q) * coarse.forward(k)).sum(-1);
  EXPECT_GT(((rough - exact).abs() / exact).max().item<double>(), worst);
}

TEST(RandomFourierFeatures, ApproximatesTheGaussianKernel) {
  for (bool orthogonal : {false, true}) {
    SCOPED_TRACE(orthogonal);
    const double t = 0.5;
    RandomFourierFeaturesImpl rff(
        kE, RandomFourierFeaturesOptions().n_dims(2 * 8192).softmax_temp(t).orthogonal(orthogonal));
    torch::manual_seed(7);
    rff.new_feature_map(torch::kCPU);
    const torch::Tensor x = torch::randn({16, kE}) * 0.5;
    const torch::Tensor y = torch::randn({16, kE}) * 0.5;
    const torch::Tensor estimate = (rff.forward(x) * rff.forward(y)).sum(-1);
    const torch::Tensor exact = torch::exp(-t * (x - y).pow(2).sum(-1) / 2);
    EXPECT_LT((estimate - exact).abs().max().item<double>(), 0.03);
  }
}

// Gram matrix of the columns [start, end) of omega, normalised.
torch::Tensor NormalisedGram(const torch::Tensor& omega, int64_t start, int64_t end) {
  const torch::Tensor block = omega.slice(1, start, end);
  const torch::Tensor unit = block / block.norm(2, 0, true);
  return torch::matmul(unit.t(), unit);
}

TEST(FillOrthogonalRandomMatrix, ColumnsAreOrthogonalInsideEachBlock) {
  torch::manual_seed(8);
  torch::Tensor w = torch::zeros({kE, 20});
  FillOrthogonalRandomMatrix(w);
  // Blocks [0, 8), [8, 16), [16, 20).
  for (auto [start, end] : {std::pair<int64_t, int64_t>{0, 8}, {8, 16}, {16, 20}}) {
    EXPECT_TRUE(torch::allclose(NormalisedGram(w, start, end), torch::eye(end - start), 0, 1e-5))
        << "block " << start;
  }
  // Different blocks come from different Gaussians: not orthogonal.
  const torch::Tensor across = NormalisedGram(w, 0, 16);
  EXPECT_GT(across.slice(0, 0, 8).slice(1, 8, 16).abs().max().item<float>(), 0.05f);
}

TEST(FillOrthogonalRandomMatrix, ScalesColumnJByTheNormOfRowJOfTheGaussian) {
  torch::manual_seed(9);
  torch::Tensor w = torch::zeros({kE, 11});
  FillOrthogonalRandomMatrix(w);

  // Replay the same draws: one E x E Gaussian per block.
  torch::manual_seed(9);
  for (int64_t start = 0; start < 11; start += kE) {
    const int64_t width = std::min<int64_t>(kE, 11 - start);
    const torch::Tensor g = torch::randn({kE, kE});
    const torch::Tensor q = std::get<0>(torch::linalg_qr(g));
    const torch::Tensor row_norms = g.norm(2, 1);
    const torch::Tensor expected = q.slice(1, 0, width) * row_norms.slice(0, 0, width).unsqueeze(0);
    EXPECT_TRUE(torch::allclose(w.slice(1, start, start + width), expected, 1e-6, 1e-6));
    EXPECT_TRUE(torch::allclose(w.slice(1, start, start + width).norm(2, 0),
                                row_norms.slice(0, 0, width), 1e-5, 1e-6));
  }
}

TEST(RandomFourierFeatures, GaussianOmegaReplaysTheGlobalGenerator) {
  RandomFourierFeaturesImpl rff(kE, RandomFourierFeaturesOptions().n_dims(10));
  torch::manual_seed(10);
  rff.new_feature_map(torch::kCPU);
  torch::manual_seed(10);
  EXPECT_TRUE(torch::equal(rff.omega(), torch::zeros({kE, 5}).normal_()));
}

TEST(RandomFeatureSampling, RedrawEveryThirdCall) {
  FavorImpl favor(kE, FavorOptions().redraw(3));
  EXPECT_EQ(favor.calls(), -1);
  std::vector<torch::Tensor> seen;
  for (int call = 0; call < 7; ++call) {
    favor.new_feature_map(torch::kCPU);
    seen.push_back(favor.omega().clone());
  }
  EXPECT_EQ(favor.calls(), 6);
  // Samples at calls 0, 3 and 6.
  EXPECT_FALSE(torch::equal(seen[0], torch::zeros_like(seen[0])));
  EXPECT_TRUE(torch::equal(seen[1], seen[0]));
  EXPECT_TRUE(torch::equal(seen[2], seen[0]));
  EXPECT_FALSE(torch::equal(seen[3], seen[2]));
  EXPECT_TRUE(torch::equal(seen[4], seen[3]));
  EXPECT_TRUE(torch::equal(seen[5], seen[3]));
  EXPECT_FALSE(torch::equal(seen[6], seen[5]));
}

TEST(RandomFeatureSampling, DefaultRedrawResamplesEveryCallAlsoInEval) {
  RandomFourierFeaturesImpl rff(kE);
  rff.eval();
  rff.new_feature_map(torch::kCPU);
  const torch::Tensor first = rff.omega().clone();
  rff.new_feature_map(torch::kCPU);
  EXPECT_FALSE(torch::equal(rff.omega(), first));
  EXPECT_EQ(rff.calls(), 1);
}

TEST(RandomFeatureSampling, DeterministicEvalKeepsOmegaInEvalOnly) {
  FavorImpl favor(kE, FavorOptions().deterministic_eval(true));
  favor.new_feature_map(torch::kCPU);  // Training mode: samples.
  const torch::Tensor trained = favor.omega().clone();
  EXPECT_FALSE(torch::equal(trained, torch::zeros_like(trained)));
  EXPECT_EQ(favor.calls(), 0);

  favor.eval();
  favor.new_feature_map(torch::kCPU);
  favor.new_feature_map(torch::kCPU);
  EXPECT_TRUE(torch::equal(favor.omega(), trained));
  EXPECT_EQ(favor.calls(), 0);  // Not even counted.

  favor.train();
  favor.new_feature_map(torch::kCPU);
  EXPECT_FALSE(torch::equal(favor.omega(), trained));
  EXPECT_EQ(favor.calls(), 1);
}

TEST(RandomFeatureSampling, FrozenMapsNeverResample) {
  GeneralizedRandomFeaturesImpl grf(kE);
  grf.new_feature_map(torch::kCPU);
  const torch::Tensor sampled = grf.omega().clone();
  grf.set_frozen(true);
  for (int i = 0; i < 3; ++i) grf.new_feature_map(torch::kCPU);
  EXPECT_TRUE(torch::equal(grf.omega(), sampled));
  EXPECT_EQ(grf.calls(), 0);
  grf.set_frozen(false);
  grf.new_feature_map(torch::kCPU);
  EXPECT_FALSE(torch::equal(grf.omega(), sampled));
}

TEST(RandomFeatureSampling, LoadedOmegaIsUsedByForward) {
  FavorImpl favor(kE, FavorOptions().n_dims(16));
  const torch::Tensor loaded = torch::randn({kE, 8});
  {
    torch::NoGradGuard no_grad;
    favor.named_buffers()["omega"].copy_(loaded);
  }
  EXPECT_TRUE(torch::equal(favor.omega(), loaded));
  const torch::Tensor x = torch::randn({1, 2, 1, kE});
  FavorImpl reference(kE, FavorOptions().n_dims(16));
  reference.omega().copy_(loaded);
  EXPECT_TRUE(torch::equal(favor.forward(x), reference.forward(x)));
}

TEST(RandomFeatureSampling, SamplesOnTheRequestedDevice) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA, 0);
  for (const torch::Device& device : devices) {
    SCOPED_TRACE(device.str());
    FavorImpl favor(kE, FavorOptions().n_dims(16));
    favor.new_feature_map(device);
    EXPECT_EQ(favor.omega().device(), device);
    EXPECT_EQ(favor.omega().scalar_type(), torch::kFloat);
    EXPECT_EQ(favor.named_buffers()["omega"].device(), device);
    const torch::Tensor x = torch::randn({1, 3, 2, kE}, torch::TensorOptions().device(device));
    EXPECT_EQ(favor.forward(x).device(), device);
  }
}

TEST(RandomFeatureSampling, WrongInputsAreNamed) {
  FavorImpl favor(kE);
  EXPECT_THROW(favor.forward(torch::randn({2, 3, kE + 1})), c10::Error);
}

TEST(RandomFeatureSampling, InvalidSettingsAreRejected) {
  EXPECT_THROW(RandomFourierFeaturesImpl(kE, RandomFourierFeaturesOptions().redraw(0)), c10::Error);
  EXPECT_THROW(RandomFourierFeaturesImpl(kE, RandomFourierFeaturesOptions().n_dims(-2)),
               c10::Error);
  EXPECT_THROW(RandomFourierFeaturesImpl(0), c10::Error);
  // Python: n_dims 0 - 1 = -1 for the smoothed map.
  EXPECT_THROW(
      SmoothedRandomFourierFeaturesImpl(kE, SmoothedRandomFourierFeaturesOptions().n_dims(0)),
      c10::Error);
}

// Gradients of sum(phi(x) * w) against central finite differences in double.
void ExpectGradientMatchesFiniteDifferences(FeatureMapImpl& fm) {
  torch::manual_seed(11);
  fm.new_feature_map(torch::kCPU);
  const torch::Tensor x0 = torch::randn({2, 3, 2, kE}, torch::kDouble) * 0.5;
  const torch::Tensor w = torch::randn({2, 3, 2, fm.output_dims()}, torch::kDouble);
  torch::Tensor x = x0.clone().requires_grad_(true);
  (fm.forward(x) * w).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  const torch::Tensor flat = x0.flatten();
  for (int64_t i : {0, 5, 17, 40, 95}) {
    const double h = 1e-6;
    torch::Tensor plus = flat.clone(), minus = flat.clone();
    plus[i] += h;
    minus[i] -= h;
    const double numeric = ((fm.forward(plus.view_as(x0)) * w).sum().item<double>() -
                            (fm.forward(minus.view_as(x0)) * w).sum().item<double>()) /
                           (2 * h);
    EXPECT_NEAR(x.grad().flatten()[i].item<double>(), numeric, 1e-5 * (1 + std::abs(numeric)))
        << fm.class_name() << " element " << i;
  }
}

TEST(RandomFeatureAutograd, GradientsFlowThroughForward) {
  RandomFourierFeaturesImpl rff(kE, RandomFourierFeaturesOptions().n_dims(10));
  SmoothedRandomFourierFeaturesImpl smoothed(kE, SmoothedRandomFourierFeaturesOptions().n_dims(11));
  FavorImpl favor(kE, FavorOptions().n_dims(12));
  FavorImpl stable(kE, FavorOptions().n_dims(12).stabilize(true));
  GeneralizedRandomFeaturesImpl grf(
      kE, GeneralizedRandomFeaturesOptions().n_dims(6).softmax_temp(0.7).kernel_fn(
              *ActivationByName("softplus")));
  for (FeatureMapImpl* fm : std::vector<FeatureMapImpl*>{&rff, &smoothed, &favor, &stable, &grf}) {
    SCOPED_TRACE(fm->class_name());
    ExpectGradientMatchesFiniteDifferences(*fm);
  }
}

}  // namespace
}  // namespace performer
