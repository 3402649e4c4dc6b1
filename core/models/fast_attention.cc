#include "core/models/fast_attention.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/attention/causal_linear_attention.h"
#include "core/attention/linear_attention.h"
#include "core/attention/linear_rows.h"
#include "core/attention/row_invariance.h"
#include "core/models/initialization.h"
#include "core/recurrent/linear_state.h"

namespace performer::models {
namespace {

double Ratio(int64_t nb_features) { return std::pow(static_cast<double>(nb_features), -0.5); }

// exp(u - diag - max_f u) + kernel eps: the softmax kernel's query features
// without their ratio, from the projections u [..., M] and diag [...].
torch::Tensor QueryExponents(const torch::Tensor& u, const torch::Tensor& diag) {
  return torch::exp(u - (diag + u.amax(-1)).unsqueeze(-1)).add_(kSoftmaxKernelEps);
}

}  // namespace

FastAttentionImpl::FastAttentionImpl(const FastAttentionConfig& config)
    : config_(config),
      feature_map_{config.no_projection           ? FeatureKind::kNoProjection
                   : config.generalized_attention ? FeatureKind::kGeneralized
                                                  : FeatureKind::kSoftmax,
                   config.kernel_fn, config.causal},
      nb_features_(config.resolved_nb_features()) {
  projection_matrix_ =
      register_buffer("projection_matrix", torch::zeros({nb_features_, config.dim_heads}));
}

std::vector<SlotTensorSpec> FastAttentionImpl::SlotStateSpec(int64_t heads) const {
  const int64_t d = config_.dim_heads;
  std::vector<SlotTensorSpec> specs{{{heads, feature_dim(), d + 1}, 0.0}};
  if (feature_map_.kind == FeatureKind::kSoftmax) {
    specs.push_back({{heads}, std::numeric_limits<float>::lowest()});
    specs.push_back({{heads, d + 1}, 0.0});
  }
  return specs;
}

torch::Tensor FastAttentionImpl::QueryFeatures(const torch::Tensor& q) const {
  return PerformerQueryFeatures(feature_map_, q, projection_matrix_);
}

torch::Tensor FastAttentionImpl::KeyFeatures(const torch::Tensor& k) const {
  return PerformerKeyFeatures(feature_map_, k, projection_matrix_);
}

torch::Tensor FastAttentionImpl::forward(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, torch::TensorList capture) {
  torch::Tensor qf = QueryFeatures(q);
  if (!config_.causal) {
    TORCH_CHECK(capture.empty(), "FastAttention: only causal attention leaves a decode state");
    // The reference's linear_attention: no epsilon in the normaliser.
    return LinearAttentionProduct(qf, KeyFeatures(k), v, /*eps=*/0.0);
  }
  if (torch::GradMode::is_enabled() &&
      (q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    // Training: the causal dot product's own backward is several times
    // faster than autograd through the prefill's chunks (bench/prefill_bench).
    TORCH_CHECK(capture.empty(),
                "FastAttention: a decode state is captured only without gradients to record");
    torch::Tensor kf = KeyFeatures(k);
    torch::Tensor numerator = CausalLinearNumerator(qf, kf, v);
    torch::Tensor denominator = (qf * (kf.cumsum(-2) + kCausalDenominatorEps)).sum(-1);
    return numerator / denominator.unsqueeze(-1);
  }
  return CausalInference(qf, k, v, {}, capture);
}

torch::Tensor FastAttentionImpl::Extend(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, torch::TensorList state) const {
  TORCH_CHECK(config_.causal, "FastAttention: only causal attention extends a decode state");
  torch::NoGradGuard no_grad;
  return CausalInference(QueryFeatures(q), k, v, state, state);
}

torch::Tensor FastAttentionImpl::CausalInference(const torch::Tensor& qf, const torch::Tensor& k,
                                                 const torch::Tensor& v, torch::TensorList from,
                                                 torch::TensorList to) const {
  // One chunkwise pass gives the numerator, the normaliser (the last
  // column) and the final state, which is the decode state.
  const int64_t d = v.size(-1);
  torch::Tensor q_sum = qf.sum(-1, /*keepdim=*/true);
  torch::Tensor out;
  if (feature_map_.kind == FeatureKind::kSoftmax) {
    // k' = r (e + 1e-4): the pass runs on the exponents e alone, in the
    // frame of the stabiliser M (the keys' maximum, or the state's if that
    // is larger, whose sums are rescaled to it), and the 1e-4 term is
    // r 1e-4 (q' . 1) (v_sum + cumsum([v, 1])). Splitting it off keeps the
    // state free of the cancellation that subtracting it afterwards would
    // cause.
    SoftmaxKeyExponents keys = ComputeSoftmaxKeyExponents(
        k, projection_matrix_, from.empty() ? torch::Tensor() : from[kStateKeyMax]);
    torch::Tensor initial_state;
    torch::Tensor v1 = AppendOne(v);
    torch::Tensor v_sums = v1.cumsum(-2);
    if (!from.empty()) {
      initial_state = from[kStateKv] *
                      torch::exp(from[kStateKeyMax] - keys.stabiliser).unsqueeze(-1).unsqueeze(-1);
      v_sums = v_sums + from[kStateValueSum].unsqueeze(-2);
    }
    LinearStateAdvance advance = AdvanceLinearState(qf, keys.exponents, v, initial_state);
    const double ratio = Ratio(nb_features_);
    out = advance.out * ratio + (q_sum * (ratio * kSoftmaxKernelEps)) * v_sums;
    if (!to.empty()) {
      // The sum is taken before the state it may alias is overwritten.
      torch::Tensor v_sum = from.empty() ? v1.sum(-2) : from[kStateValueSum] + v1.sum(-2);
      to[kStateKv].copy_(advance.final_state);
      to[kStateValueSum].copy_(v_sum);
      to[kStateKeyMax].copy_(keys.stabiliser);
    }
  } else {
    LinearStateAdvance advance =
        AdvanceLinearState(qf, KeyFeatures(k), v, from.empty() ? torch::Tensor() : from[kStateKv]);
    out = advance.out;
    if (!to.empty()) to[kStateKv].copy_(advance.final_state);
  }
  torch::Tensor denominator = out.narrow(-1, d, 1) + kCausalDenominatorEps * q_sum;
  return (out.narrow(-1, 0, d) / denominator).to(v.scalar_type());
}

void FastAttentionImpl::PrepareForDecoding(bool project_in_step) {
  torch::NoGradGuard no_grad;
  project_in_step_ = project_in_step;
  const double c = std::pow(static_cast<double>(config_.dim_heads), -0.25);
  scaled_projection_ = (projection_matrix_ * c).contiguous();
  scaled_projection_t_ = scaled_projection_.t().contiguous();
}

void FastAttentionImpl::RedrawProjectionMatrix() {
  torch::NoGradGuard no_grad;
  projection_matrix_.copy_(
      GaussianOrthogonalRandomMatrix(nb_features_, config_.dim_heads, config_.ortho_scaling));
  scaled_projection_ = torch::Tensor();
  scaled_projection_t_ = torch::Tensor();
}

torch::Tensor FastAttentionImpl::Step(const torch::Tensor& qk, const torch::Tensor& v,
                                      torch::TensorList state) const {
  const int64_t rows = qk.size(0), heads = qk.size(1) / 2, d = v.size(-1);
  const int64_t m = feature_dim(), flat = rows * heads;
  torch::Tensor kv = state[kStateKv].view({flat, m, d + 1});
  torch::Tensor v_flat = v.reshape({flat, d});
  if (feature_map_.kind != FeatureKind::kSoftmax) {
    return StepLinearState(kv, RowFeatures(qk.narrow(1, 0, heads), true).reshape({flat, m}),
                           RowFeatures(qk.narrow(1, heads, heads), false).reshape({flat, m}),
                           v_flat, torch::Tensor(), torch::Tensor(), 1.0, 0.0,
                           kCausalDenominatorEps)
        .view({rows, heads, d});
  }
  // One projection for q and k. q' = r (e_q + 1e-4) and k' = r (e_k + 1e-4)
  // with e_k in the frame of the running key maximum (rescaled by decay when
  // it grows); the step gets e_q + 1e-4 and e_k, and the factors r and the
  // 1e-4 of every key go into scale / offset / eps.
  const torch::Tensor& state_key_max = state[kStateKeyMax];
  torch::Tensor sums = state[kStateValueSum].view({flat, d + 1});
  const bool fused = FusedLinearStateStep(kv) && state_key_max.is_contiguous() &&
                     state[kStateValueSum].is_contiguous();
  // The projection too, in the state kernel's launch: where asked, and on
  // row-invariant CUDA (core/attention/row_invariance.h), where every step
  // and scan forms it there (one chain of operations per row).
  if (fused && kv.is_cuda() && (project_in_step_ || RowInvariantOn(kv.device())) &&
      scaled_projection_t_.defined()) {
    torch::Tensor key_max = state_key_max.view({flat});
    return StepProjectedSoftmaxKernelState(kv, key_max, sums, qk.reshape({rows, 2, heads, d}),
                                           scaled_projection_t_, v_flat, kSoftmaxKernelEps,
                                           kCausalDenominatorEps)
        .view({rows, heads, d});
  }
  auto [u, diag] = SoftmaxInputs(qk);
  if (fused) {
    // Feature map, rescaling, update, read-out and normalisation in one pass.
    torch::Tensor key_max = state_key_max.view({flat});
    return StepSoftmaxKernelState(kv, key_max, sums, u.view({rows, 2, heads, m}),
                                  diag.view({rows, 2, heads}), v_flat, kSoftmaxKernelEps,
                                  kCausalDenominatorEps)
        .view({rows, heads, d});
  }
  torch::Tensor uq = u.narrow(1, 0, heads), uk = u.narrow(1, heads, heads);
  torch::Tensor q_features = QueryExponents(uq, diag.narrow(1, 0, heads));
  torch::Tensor new_max = torch::maximum(state_key_max, uk.amax(-1));
  torch::Tensor decay = torch::exp(state_key_max - new_max);
  torch::Tensor key_features =
      torch::exp(uk - (diag.narrow(1, heads, heads) + new_max).unsqueeze(-1));
  state_key_max.copy_(new_max);
  const double ratio = Ratio(m), scale = ratio * ratio;
  return StepLinearState(kv, q_features.reshape({flat, m}), key_features.reshape({flat, m}), v_flat,
                         decay.reshape({flat}), sums, scale, scale * kSoftmaxKernelEps,
                         kCausalDenominatorEps * ratio)
      .view({rows, heads, d});
}

bool FastAttentionImpl::ProjectsRowInvariantly(const torch::Tensor& x) const {
  return scaled_projection_.defined() && RowInvariantOn(x.device()) &&
         x.scalar_type() == torch::kFloat && scaled_projection_.scalar_type() == torch::kFloat;
}

std::pair<torch::Tensor, torch::Tensor> FastAttentionImpl::SoftmaxInputs(
    const torch::Tensor& x) const {
  const int64_t d = x.size(-1);
  std::vector<int64_t> row_shape = x.sizes().vec();
  row_shape.pop_back();
  // On CUDA the row-invariant FAVOR+ projection is the state kernel's (Step,
  // Scan); these tensor ops serve the other callers there.
  if (!ProjectsRowInvariantly(x) || !x.device().is_cpu()) {
    torch::Tensor u = scaled_projection_t_.defined() ? torch::matmul(x, scaled_projection_t_)
                                                     : ProjectFeatures(x, projection_matrix_);
    return {u, SoftmaxKernelDiag(x).squeeze(-1)};
  }
  torch::Tensor rows = x.reshape({-1, d}).contiguous();
  std::vector<int64_t> u_shape = row_shape;
  u_shape.push_back(scaled_projection_.size(0));
  // The row-invariant product (core/attention/linear_rows.h).
  torch::Tensor u = LinearRows(scaled_projection_, torch::Tensor(), rows).view(u_shape);
  const auto c2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  torch::Tensor diag = torch::empty({rows.size(0)}, rows.options());
  const float* in = rows.data_ptr<float>();
  float* out = diag.data_ptr<float>();
  for (int64_t r = 0; r < rows.size(0); ++r) {
    float squares = 0.0f;
    for (int64_t i = 0; i < d; ++i) squares += in[r * d + i] * in[r * d + i];
    out[r] = squares / 2.0f * c2;
  }
  return {u, diag.view(row_shape)};
}

torch::Tensor FastAttentionImpl::RowFeatures(const torch::Tensor& x, bool is_query) const {
  if (feature_map_.kind != FeatureKind::kGeneralized || !ProjectsRowInvariantly(x)) {
    return is_query ? QueryFeatures(x) : KeyFeatures(x);
  }
  // The generalized map is the same for queries and keys:
  // kernel_fn(d^-1/4 x P^T) + eps, elementwise after the product.
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = scaled_projection_.size(0);
  torch::Tensor u =
      LinearRows(scaled_projection_, torch::Tensor(), x.reshape({-1, x.size(-1)}).contiguous());
  return ApplyKernelFunction(feature_map_.kernel_fn, u.view(shape)) + kGeneralizedKernelEps;
}

bool FastAttentionImpl::ScanSupported(torch::TensorList state) const {
  return config_.causal && !state.empty() && ScanLinearStateSupported(state[kStateKv]) &&
         (feature_map_.kind != FeatureKind::kSoftmax ||
          (state[kStateKeyMax].is_contiguous() && state[kStateValueSum].is_contiguous() &&
           (state[kStateKv].device().is_cpu() || scaled_projection_t_.defined())));
}

torch::Tensor FastAttentionImpl::Scan(const torch::Tensor& qk, const torch::Tensor& v,
                                      torch::TensorList state) const {
  TORCH_CHECK(ScanSupported(state), "FastAttention::Scan: no scan for this state");
  const int64_t c = qk.size(0), t = qk.size(1), heads = qk.size(2) / 2, d = v.size(-1);
  const int64_t m = feature_dim();
  torch::Tensor kv = state[kStateKv].view({c * heads, m, d + 1});
  torch::Tensor values = v.to(torch::kFloat).contiguous();
  if (feature_map_.kind != FeatureKind::kSoftmax) {
    torch::Tensor qf = RowFeatures(qk.narrow(2, 0, heads), true).contiguous();
    torch::Tensor kf = RowFeatures(qk.narrow(2, heads, heads), false).contiguous();
    return ScanLinearState(kv, qf, kf, values, torch::Tensor(), 1.0, 0.0, kCausalDenominatorEps)
        .to(v.scalar_type());
  }
  torch::Tensor key_max = state[kStateKeyMax].view({c * heads});
  torch::Tensor sums = state[kStateValueSum].view({c * heads, d + 1});
  if (kv.is_cuda()) {
    // The tokens in order, each with the step kernel's body, its projection
    // included (one launch).
    return ScanProjectedSoftmaxKernelState(
               kv, key_max, sums, qk.reshape({c, t, 2, heads, qk.size(-1)}), scaled_projection_t_,
               values, kSoftmaxKernelEps, kCausalDenominatorEps)
        .to(v.scalar_type());
  }
  auto [u, diag] = SoftmaxInputs(qk);
  return ScanSoftmaxKernelState(kv, key_max, sums, u.view({c, t, 2, heads, m}),
                                diag.view({c, t, 2, heads}), values, kSoftmaxKernelEps,
                                kCausalDenominatorEps)
      .to(v.scalar_type());
}

torch::Tensor FastAttentionImpl::Summarize(const torch::Tensor& k, const torch::Tensor& v) const {
  return torch::matmul(KeyFeatures(k).transpose(-1, -2), AppendOne(v));
}

torch::Tensor FastAttentionImpl::AttendSummary(const torch::Tensor& q,
                                               const torch::Tensor& kv) const {
  const bool kernel = q.scalar_type() == torch::kFloat && ReadOutStateSupported(kv);
  if (kernel && feature_map_.kind == FeatureKind::kSoftmax && scaled_projection_t_.defined()) {
    // Row-invariant CUDA: each row's query features and read-out in one
    // block (core/attention/row_invariance.h).
    return ReadOutProjectedSoftmaxKernelState(kv, q, scaled_projection_t_, kSoftmaxKernelEps);
  }
  const int64_t rows = q.size(0), heads = q.size(1), d = kv.size(-1) - 1, m = kv.size(-2);
  torch::Tensor qf;
  if (feature_map_.kind == FeatureKind::kSoftmax && ProjectsRowInvariantly(q) &&
      q.device().is_cpu()) {
    // The CPU's row-invariant product and diagonal (SoftmaxInputs), so that
    // a token's read-out does not depend on the other rows.
    auto [u, diag] = SoftmaxInputs(q);
    qf = Ratio(m) * QueryExponents(u, diag);
  } else {
    qf = RowFeatures(q, /*is_query=*/true);
    // Row-invariant CUDA: generalized features from the row-invariant
    // product (RowFeatures), softmax features row by row; the read-out a
    // block per row and head.
    if (kernel) return ReadOutLinearState(kv, qf.to(torch::kFloat));
  }
  torch::Tensor out =
      torch::bmm(qf.reshape({rows * heads, 1, m}), kv.reshape({rows * heads, m, d + 1}))
          .view({rows, heads, d + 1});
  return out.narrow(-1, 0, d) / out.select(-1, d).unsqueeze(-1);
}

}  // namespace performer::models
