#include "core/models/branch.h"

#include "core/attention/row_norm.h"

namespace performer::models {
namespace {

constexpr double kScaleNormEps = 1e-5;

// Registers `leaf` as <parent>.fn.fn... (`depth` levels of "fn"); the
// intermediate levels are the reference's parameterless wrappers (Chunk,
// PreShiftTokens), kept only for their names.
void RegisterNested(torch::nn::Module& parent, int depth,
                    const std::shared_ptr<torch::nn::Module>& leaf) {
  torch::nn::Module* level = &parent;
  for (int i = 1; i < depth; ++i) {
    level = level->register_module("fn", std::make_shared<torch::nn::Module>()).get();
  }
  level->register_module("fn", leaf);
}

}  // namespace

BranchImpl::BranchImpl(int64_t dim, BranchNorm norm, bool shift_tokens, bool causal,
                       PerformerAttention attention, FeedForward feed_forward)
    : dim_(dim),
      norm_kind_(norm),
      shift_tokens_(shift_tokens),
      attention_(std::move(attention)),
      feed_forward_(std::move(feed_forward)) {
  shifts_ = causal ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{-1, 0, 1};
  switch (norm) {
    case BranchNorm::kLayerNorm:
      norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
      break;
    case BranchNorm::kScaleNorm:
      g_ = register_parameter("g", torch::ones({1}));
      break;
    case BranchNorm::kReZero:
      g_ = register_parameter("g", torch::full({}, 1e-3));
      break;
  }
  const int shift_level = shift_tokens ? 1 : 0;
  if (!attention_.is_empty()) {
    RegisterNested(*this, 1 + shift_level, attention_.ptr());
  } else {
    // Chunk(FeedForward): one more level.
    RegisterNested(*this, 2 + shift_level, feed_forward_.ptr());
  }
}

torch::Tensor BranchImpl::Normalize(const torch::Tensor& x) {
  switch (norm_kind_) {
    case BranchNorm::kLayerNorm:
      return LayerNormRows(norm_, x);
    case BranchNorm::kScaleNorm:
      return ScaleNormRows(x, g_, kScaleNormEps);
    case BranchNorm::kReZero:
      break;
  }
  return x;
}

torch::Tensor BranchImpl::Shift(const torch::Tensor& x, const torch::Tensor& mask) const {
  const int64_t segments = static_cast<int64_t>(shifts_.size());
  const int64_t piece = x.size(-1) / segments;
  const int64_t n = x.size(1);
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i < segments; ++i) {
    torch::Tensor t = x.narrow(-1, i * piece, piece);
    const int64_t amount = shifts_[static_cast<size_t>(i)];
    if (amount != 0) {
      if (mask.defined()) t = t.masked_fill(mask.to(torch::kBool).logical_not().unsqueeze(-1), 0.0);
      // F.pad(t, (0, 0, amount, -amount)): later by `amount` positions.
      torch::Tensor zeros = torch::zeros_like(t.narrow(1, 0, 1));
      t = amount > 0 ? torch::cat({zeros, t.narrow(1, 0, n - 1)}, 1)
                     : torch::cat({t.narrow(1, 1, n - 1), zeros}, 1);
    }
    parts.push_back(t);
  }
  if (segments * piece < x.size(-1)) {
    parts.push_back(x.narrow(-1, segments * piece, x.size(-1) - segments * piece));
  }
  return torch::cat(parts, -1);
}

std::vector<SlotTensorSpec> BranchImpl::SlotStateSpec() const {
  std::vector<SlotTensorSpec> specs;
  if (is_attention()) specs = attention_->SlotStateSpec();
  if (shift_tokens_) specs.push_back({{shift_piece()}, 0.0});
  return specs;
}

torch::TensorList BranchImpl::AttentionState(torch::TensorList state) const {
  return shift_tokens_ ? state.slice(0, state.size() - 1) : state;
}

torch::Tensor BranchImpl::Inner(const torch::Tensor& x, const BranchInputs& in,
                                torch::TensorList capture) {
  if (attention_.is_empty()) return feed_forward_(x);
  return attention_(x, in.rotary, in.mask, in.context, in.context_mask,
                    is_cross() ? torch::TensorList() : capture);
}

torch::Tensor BranchImpl::forward(const torch::Tensor& x, const BranchInputs& in,
                                  torch::TensorList capture) {
  torch::Tensor h = Normalize(x);
  if (shift_tokens_) {
    if (!capture.empty()) {
      capture.back().copy_(h.select(1, h.size(1) - 1).narrow(-1, shift_piece(), shift_piece()));
    }
    // Only the attention branch receives the mask
    // (docs/reference/performer-pytorch.md §4.5).
    h = Shift(h, is_attention() ? in.mask : torch::Tensor());
  }
  torch::Tensor out = Inner(h, in, capture.empty() ? capture : AttentionState(capture));
  return norm_kind_ == BranchNorm::kReZero ? out * g_ : out;
}

torch::Tensor BranchImpl::Step(const torch::Tensor& x, const InterleavedRotary& rotary,
                               const torch::Tensor& positions, torch::TensorList state) {
  torch::Tensor h = Normalize(x);
  if (shift_tokens_) {
    // Causal shifts (0, 1): the second piece comes from the previous position.
    const torch::Tensor& previous = state.back();
    const int64_t piece = shift_piece();
    torch::Tensor current = h.narrow(-1, piece, piece).clone();
    h = torch::cat(
        {h.narrow(-1, 0, piece), previous, h.narrow(-1, 2 * piece, h.size(-1) - 2 * piece)}, -1);
    previous.copy_(current);
  }
  torch::Tensor out;
  if (attention_.is_empty()) {
    out = feed_forward_->Step(h);
  } else if (is_cross()) {
    out = attention_->CrossStep(h, state.front());
  } else {
    out = attention_->Step(h, rotary, positions, AttentionState(state));
  }
  return norm_kind_ == BranchNorm::kReZero ? out * g_ : out;
}

bool BranchImpl::fuses_step() const {
  return norm_kind_ == BranchNorm::kLayerNorm && !shift_tokens_ && !is_cross();
}

void BranchImpl::PrepareForDecoding(const DecodeStepOptions& options) {
  if (is_cross()) {
    attention_->PrepareCrossForDecoding();
    return;
  }
  if (is_attention()) {
    attention_->PrepareForDecoding(options);
  } else {
    feed_forward_->PrepareForDecoding(options);
  }
}

void BranchImpl::AppendDecodeTensors(std::vector<torch::Tensor>* out) const {
  if (is_attention()) attention_->AppendDecodeTensors(out);
}

torch::Tensor BranchImpl::StepWithResidual(const torch::Tensor& x, const InterleavedRotary& rotary,
                                           const torch::Tensor& positions, torch::TensorList state,
                                           bool chunk) {
  TORCH_CHECK(fuses_step(), "Branch::StepWithResidual: this branch does not fuse its step");
  FusedLinearOptions norm;
  norm.norm_weight = norm_->weight;
  norm.norm_bias = norm_->bias;
  norm.norm_eps = norm_->options.eps();
  if (is_attention()) return attention_->FusedStep(x, norm, rotary, positions, state, chunk);
  return feed_forward_->FusedStep(x, norm);
}

torch::Tensor BranchImpl::Extend(const torch::Tensor& x, const InterleavedRotary& rotary,
                                 const torch::Tensor& positions, torch::TensorList state) {
  const int64_t count = x.size(0);
  torch::Tensor h = Normalize(x);
  if (shift_tokens_) {
    // Each position takes the piece of the one before it; the first takes
    // the carried piece, and the last one's piece is carried on.
    const torch::Tensor& previous = state.back();
    const int64_t piece = shift_piece();
    torch::Tensor current = h.narrow(-1, piece, piece);
    torch::Tensor shifted = torch::cat({previous, current.narrow(0, 0, count - 1)}, 0);
    torch::Tensor last = current.narrow(0, count - 1, 1).clone();
    h = torch::cat(
        {h.narrow(-1, 0, piece), shifted, h.narrow(-1, 2 * piece, h.size(-1) - 2 * piece)}, -1);
    previous.copy_(last);
  }
  torch::Tensor out;
  if (attention_.is_empty()) {
    out = feed_forward_->Step(h);
  } else if (is_cross()) {
    const torch::Tensor& summary = state.front();
    std::vector<int64_t> shape = summary.sizes().vec();
    shape[0] = count;
    out = attention_->CrossStep(h, summary.expand(shape));
  } else {
    out = attention_->Extend(h, rotary, positions, AttentionState(state));
  }
  return norm_kind_ == BranchNorm::kReZero ? out * g_ : out;
}

}  // namespace performer::models
