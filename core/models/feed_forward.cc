#include "core/models/feed_forward.h"

#include "core/attention/linear_rows.h"
#include "core/attention/linear_weights.h"
#include "core/models/model_weights.h"

namespace performer::models {

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t mult, bool glu, double dropout)
    : glu_(glu), dropout_(dropout) {
  w1_ = register_module("w1", torch::nn::Linear(dim, dim * mult * (glu ? 2 : 1)));
  w2_ = register_module("w2", torch::nn::Linear(dim * mult, dim));
}

torch::Tensor FeedForwardImpl::Activate(const torch::Tensor& h) const {
  // Inference: each row's GELU the same bits whatever the other rows.
  auto gelu = [](const torch::Tensor& t) {
    return torch::GradMode::is_enabled() ? torch::gelu(t) : GeluRows(t);
  };
  if (!glu_) return gelu(h);
  std::vector<torch::Tensor> halves = h.chunk(2, -1);
  return gelu(halves[0]) * halves[1];
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  torch::Tensor h = Activate(ApplyLinear(w1_, x));
  if (dropout_ > 0.0 && is_training()) h = torch::dropout(h, dropout_, /*train=*/true);
  return ApplyLinear(w2_, h);
}

torch::Tensor FeedForwardImpl::Step(const torch::Tensor& x) {
  return LinearRows(w2_, Activate(LinearRows(w1_, x)).contiguous());
}

void FeedForwardImpl::PrepareForDecoding(const DecodeStepOptions& options) {
  torch::NoGradGuard no_grad;
  ConvertLinearWeights({this}, WeightScalarType(options.weight_dtype));
  w1_scales_ = LinearWeightScales(*w1_);
  w2_scales_ = LinearWeightScales(*w2_);
  prepared_ = true;
}

torch::Tensor FeedForwardImpl::FusedStep(const torch::Tensor& x, const FusedLinearOptions& norm) {
  TORCH_CHECK(prepared_, "FeedForward::FusedStep needs PrepareForDecoding");
  FusedLinearOptions first = norm;
  first.bias = w1_->bias;
  first.weight_scales = w1_scales_;
  // GELU fuses into w1 without GLU; with it, the halves multiply after.
  if (!glu_) first.activation = FusedActivation::kGelu;
  torch::Tensor h = FusedLinearRows(x, w1_->weight, first);
  if (glu_) h = Activate(h).contiguous();
  FusedLinearOptions second;
  second.bias = w2_->bias;
  second.residual = x;
  second.weight_scales = w2_scales_;
  return FusedLinearRows(h, w2_->weight, second);
}

}  // namespace performer::models
