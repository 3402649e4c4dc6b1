// Small, obviously correct batch attentions and feature maps for the tests of
// the attention layers, recurrent attentions and transformer layers: dense
// formulas written straight from the reference, independent of the
// production attention files.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "core/attention/attention.h"
#include "core/feature_maps/feature_map.h"
#include "core/registry/param_value.h"

namespace performer::testing {

// softmax_s(t * q.k + attn_add + key_add) v, t = softmax_temp or 1/sqrt(E).
class ReferenceFullAttention : public AttentionImpl {
 public:
  explicit ReferenceFullAttention(std::optional<double> softmax_temp = std::nullopt)
      : softmax_temp_(softmax_temp) {}
  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override {
    const double t = SoftmaxTemperature(softmax_temp_, queries.size(-1));
    torch::Tensor scores = torch::einsum("nlhe,nshe->nhls", {queries, keys}) * t;
    scores = scores + attn_mask.additive_matrix().to(scores.device());
    scores = scores + key_lengths.additive_matrix().to(scores.device()).unsqueeze(1).unsqueeze(1);
    torch::Tensor a = torch::softmax(scores, -1);
    return torch::einsum("nhls,nshd->nlhd", {a, values});
  }
  std::string class_name() const override { return "FullAttention"; }

 private:
  std::optional<double> softmax_temp_;
};

// elu(x) + 1, deterministic; counts new_feature_map calls.
class CountingEluFeatureMap : public FeatureMapImpl {
 public:
  explicit CountingEluFeatureMap(int64_t query_dims) : FeatureMapImpl(query_dims) {}
  void new_feature_map(torch::Device) override { ++new_feature_map_calls; }
  torch::Tensor forward(const torch::Tensor& x) override { return torch::elu(x) + 1; }
  int64_t output_dims() const override { return query_dims(); }
  std::string class_name() const override { return "CountingEluFeatureMap"; }
  int new_feature_map_calls = 0;
};

// A fixed random-feature map: phi(x) = exp(x W - |x|^2/2) with W of shape
// (E, F), F != E, so that state shapes distinguish F from E and D.
class FixedExpFeatureMap : public FeatureMapImpl {
 public:
  FixedExpFeatureMap(int64_t query_dims, int64_t features) : FeatureMapImpl(query_dims) {
    // Deterministic, RNG-free entries so that tests do not disturb the seed.
    omega = register_buffer("omega", torch::arange(query_dims * features, torch::kFloat)
                                         .reshape({query_dims, features})
                                         .mul(0.7)
                                         .sin()
                                         .mul(0.5));
  }
  void new_feature_map(torch::Device) override {}
  torch::Tensor forward(const torch::Tensor& x) override {
    return torch::exp(torch::matmul(x, omega) - 0.5 * (x * x).sum(-1, true) * 0.1);
  }
  int64_t output_dims() const override { return omega.size(1); }
  std::string class_name() const override { return "FixedExpFeatureMap"; }
  torch::Tensor omega;
};

inline NamedFeatureMapFactory CountingEluFactory() {
  return {"CountingEluFeatureMap",
          [](int64_t e) -> FeatureMapPtr { return std::make_shared<CountingEluFeatureMap>(e); }};
}

inline NamedFeatureMapFactory FixedExpFactory(int64_t features) {
  return {"FixedExpFeatureMap", [features](int64_t e) -> FeatureMapPtr {
            return std::make_shared<FixedExpFeatureMap>(e, features);
          }};
}

// Linear attention from the definition; causal: prefix sums over keys
// (requires L == S here), else all keys. phi(k) is zeroed past key lengths.
class ReferenceLinearAttention : public AttentionImpl {
 public:
  ReferenceLinearAttention(FeatureMapPtr feature_map, bool causal)
      : feature_map_(std::move(feature_map)), causal_(causal) {
    register_module("feature_map", feature_map_);
  }
  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override {
    TORCH_CHECK(causal_ ? attn_mask.lower_triangular() : attn_mask.all_ones(),
                "reference linear attention: unsupported mask");
    torch::Tensor phi_q = feature_map_->forward_queries(queries);  // (N,L,H,F)
    torch::Tensor phi_k = feature_map_->forward_keys(keys) *
                          key_lengths.float_matrix().to(keys.device()).unsqueeze(-1).unsqueeze(-1);
    torch::Tensor kv = torch::einsum("nshf,nshd->nshfd", {phi_k, values});
    torch::Tensor z = phi_k;
    if (causal_) {
      kv = kv.cumsum(1);
      z = z.cumsum(1);
    } else {
      kv = kv.sum(1, true);
      z = z.sum(1, true);
    }
    torch::Tensor num =
        torch::einsum("nlhf,nlhfd->nlhd", {phi_q, kv.expand({-1, phi_q.size(1), -1, -1, -1})});
    torch::Tensor den = (phi_q * z).sum(-1, true) + 1e-6;
    return num / den;
  }
  std::string class_name() const override {
    return causal_ ? "CausalLinearAttention" : "LinearAttention";
  }

 private:
  FeatureMapPtr feature_map_;
  bool causal_;
};

}  // namespace performer::testing
