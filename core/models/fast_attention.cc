#include "core/models/fast_attention.h"

#include <cmath>

#include "core/feature_maps/performer_kernels.h"
#include "kernels/causal_product.h"
#include "kernels/linear_state_step.h"

namespace performer::models {
namespace {

// [.., d] -> [.., d + 1] with a trailing 1: one matmul then yields both the
// numerator (first d columns) and the normaliser (last column).
torch::Tensor AppendOne(const torch::Tensor& v) {
  return torch::cat({v, torch::ones_like(v.narrow(-1, 0, 1))}, -1);
}

double Ratio(int64_t nb_features) { return std::pow(static_cast<double>(nb_features), -0.5); }

}  // namespace

FastAttentionImpl::FastAttentionImpl(const FastAttentionConfig& config)
    : config_(config),
      kind_(config.no_projection           ? FeatureKind::kNoProjection
            : config.generalized_attention ? FeatureKind::kGeneralized
                                           : FeatureKind::kSoftmax),
      nb_features_(config.resolved_nb_features()) {
  projection_matrix_ =
      register_buffer("projection_matrix", torch::zeros({nb_features_, config.dim_heads}));
}

torch::Tensor FastAttentionImpl::QueryFeatures(const torch::Tensor& q) const {
  switch (kind_) {
    case FeatureKind::kNoProjection:
      return q.softmax(-1);
    case FeatureKind::kGeneralized:
      return GeneralizedKernel(q, projection_matrix_, config_.kernel_fn);
    case FeatureKind::kSoftmax:
      break;
  }
  return SoftmaxKernelQuery(q, projection_matrix_);
}

torch::Tensor FastAttentionImpl::KeyFeatures(const torch::Tensor& k) const {
  switch (kind_) {
    case FeatureKind::kNoProjection:
      return config_.causal ? k.exp() : k.softmax(-2);
    case FeatureKind::kGeneralized:
      return GeneralizedKernel(k, projection_matrix_, config_.kernel_fn);
    case FeatureKind::kSoftmax:
      break;
  }
  return SoftmaxKernelKey(k, projection_matrix_);
}

torch::Tensor FastAttentionImpl::forward(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v) {
  torch::Tensor qf = QueryFeatures(q);
  torch::Tensor kf = KeyFeatures(k);
  if (config_.causal) {
    torch::Tensor numerator = kernels::CausalDotProduct(qf, kf, v);
    torch::Tensor denominator = (qf * (kf.cumsum(-2) + kCausalDenominatorEps)).sum(-1);
    return numerator / denominator.unsqueeze(-1);
  }
  torch::Tensor d_inv = 1.0 / torch::matmul(qf, kf.sum(-2).unsqueeze(-1));
  torch::Tensor context = torch::matmul(kf.transpose(-1, -2), v);
  return torch::matmul(qf, context) * d_inv;
}

void FastAttentionImpl::InitState(const torch::Tensor& k, const torch::Tensor& v,
                                  SelfAttentionState& state) const {
  torch::Tensor v1 = AppendOne(v);
  if (kind_ == FeatureKind::kSoftmax) {
    torch::Tensor u = ProjectFeatures(k, projection_matrix_);
    torch::Tensor key_max = u.amax({-1, -2});
    torch::Tensor e = torch::exp(u - SoftmaxKernelDiag(k) - key_max.unsqueeze(-1).unsqueeze(-1));
    state.kv.copy_(torch::matmul(e.transpose(-1, -2), v1));
    state.v_sum.copy_(v1.sum(-2));
    state.key_max.copy_(key_max);
    return;
  }
  state.kv.copy_(torch::matmul(KeyFeatures(k).transpose(-1, -2), v1));
}

torch::Tensor FastAttentionImpl::Step(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, SelfAttentionState& state) const {
  const int64_t rows = q.size(0), heads = q.size(1), d = v.size(-1);
  const int64_t m = feature_dim(), flat = rows * heads;
  torch::Tensor qf, key_features, decay;
  if (kind_ == FeatureKind::kSoftmax) {
    // q and k share one projection; running key maximum: when it grows the
    // sums are rescaled (decay < 1).
    torch::Tensor qk = torch::cat({q, k}, 1);
    torch::Tensor u_all = ProjectFeatures(qk, projection_matrix_);
    torch::Tensor diag = SoftmaxKernelDiag(qk);
    torch::Tensor uq = u_all.narrow(1, 0, heads), u = u_all.narrow(1, heads, heads);
    qf = Ratio(m) * (torch::exp(uq - diag.narrow(1, 0, heads) - std::get<0>(uq.max(-1, true))) +
                     kSoftmaxKernelEps);
    torch::Tensor new_max = torch::maximum(state.key_max, u.amax(-1));
    decay = torch::exp(state.key_max - new_max);
    key_features = torch::exp(u - diag.narrow(1, heads, heads) - new_max.unsqueeze(-1));
    state.key_max.copy_(new_max);
    state.v_sum.narrow(-1, 0, d).add_(v);
    state.v_sum.select(-1, d).add_(1.0);
  } else {
    qf = QueryFeatures(q);
    key_features = KeyFeatures(k);
  }
  torch::Tensor q_sum = qf.sum(-1);
  torch::Tensor kv = state.kv.view({flat, m, d + 1});
  torch::Tensor out;
  if (kernels::LinearStateStepSupported(kv)) {
    out = kernels::LinearStateStep(kv, qf.reshape({flat, m}), key_features.reshape({flat, m}),
                                   v.reshape({flat, d}),
                                   decay.defined() ? decay.reshape({flat}) : torch::Tensor());
  } else {
    if (decay.defined()) kv.mul_(decay.reshape({flat, 1, 1}));
    kv.baddbmm_(key_features.reshape({flat, m, 1}), AppendOne(v).reshape({flat, 1, d + 1}));
    out = torch::bmm(qf.reshape({flat, 1, m}), kv);
  }
  out = out.view({rows, heads, d + 1});
  if (kind_ == FeatureKind::kSoftmax) {
    const double ratio = Ratio(m);
    out = ratio * out + (ratio * kSoftmaxKernelEps) * q_sum.unsqueeze(-1) * state.v_sum;
  }
  torch::Tensor denominator = out.select(-1, d) + kCausalDenominatorEps * q_sum;
  return out.narrow(-1, 0, d) / denominator.unsqueeze(-1);
}

torch::Tensor FastAttentionImpl::Summarize(const torch::Tensor& k, const torch::Tensor& v) const {
  return torch::matmul(KeyFeatures(k).transpose(-1, -2), AppendOne(v));
}

torch::Tensor FastAttentionImpl::AttendSummary(const torch::Tensor& q,
                                               const torch::Tensor& kv) const {
  const int64_t rows = q.size(0), heads = q.size(1), d = kv.size(-1) - 1, m = kv.size(-2);
  torch::Tensor qf = QueryFeatures(q);
  torch::Tensor out =
      torch::bmm(qf.reshape({rows * heads, 1, m}), kv.reshape({rows * heads, m, d + 1}))
          .view({rows, heads, d + 1});
  return out.narrow(-1, 0, d) / out.select(-1, d).unsqueeze(-1);
}

}  // namespace performer::models
