#include "core/models/performer_lm.h"

#include "core/attention/linear_rows.h"
#include "core/attention/linear_weights.h"
#include "core/attention/row_norm.h"
#include "core/models/model_weights.h"

namespace performer::models {

PerformerLMImpl::PerformerLMImpl(const PerformerLMConfig& config) : config_(config) {
  token_emb_ = register_module("token_emb", torch::nn::Embedding(config.num_tokens, config.dim));
  PositionalKind kind = config.rotary_position_emb  ? PositionalKind::kFixedSinusoidal
                        : config.axial_position_emb ? PositionalKind::kAxial
                                                    : PositionalKind::kLearned;
  pos_emb_ = register_module("pos_emb", PositionalEmbedding(kind, config.max_seq_len, config.dim,
                                                            config.resolved_axial_shape()));
  if (config.rotary_position_emb) {
    auto layer_pos = register_module("layer_pos_emb", std::make_shared<torch::nn::Module>());
    layer_pos_emb_ = layer_pos->register_buffer(
        "emb", torch::zeros({config.max_seq_len, config.resolved_dim_head()}));
  }
  performer_ = register_module("performer", PerformerStack(config));
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.dim})));
  if (!config.tie_embed) {
    to_out_ = register_module("to_out", torch::nn::Linear(config.dim, config.num_tokens));
  }
}

void PerformerLMImpl::TieTokenEmbedding(const torch::nn::Embedding& other) {
  token_emb_ = replace_module("token_emb", other);
}

torch::Tensor PerformerLMImpl::Logits(const torch::Tensor& encodings) {
  if (config_.tie_embed) return torch::matmul(encodings, token_emb_->weight.t());
  return ApplyLinear(to_out_, encodings);
}

torch::Tensor PerformerLMImpl::forward(const torch::Tensor& tokens,
                                       const LMForwardOptions& options) {
  const int64_t n = tokens.size(1);
  TORCH_CHECK(n <= config_.position_limit(), "sequence length ", n, " exceeds max_seq_len ",
              config_.position_limit());
  torch::Tensor x = token_emb_(tokens) + pos_emb_->First(n);
  if (config_.emb_dropout > 0.0 && is_training()) {
    x = torch::dropout(x, config_.emb_dropout, /*train=*/true);
  }
  if (options.trace != nullptr) (*options.trace)["embed"] = x;
  BranchInputs in;
  if (layer_pos_emb_.defined()) {
    // Built once per forward (or once per model by PrepareForDecoding), not per layer.
    in.rotary = rotary_.defined() ? rotary_.First(n)
                                  : MakeInterleavedRotary(layer_pos_emb_.narrow(0, 0, n));
  }
  in.mask = options.mask;
  in.context = options.context;
  in.context_mask = options.context_mask;
  x = performer_(x, in, options.capture, options.trace);
  x = norm_(x);
  if (options.capture != nullptr) options.capture->front().positions.fill_(n);
  if (options.return_encodings) return x;
  return Logits(x);
}

torch::Tensor PerformerLMImpl::Step(const torch::Tensor& tokens,
                                    const std::vector<SlotRows>& state) {
  const torch::Tensor& positions = state.front().positions;
  torch::Tensor x = token_emb_(tokens) + pos_emb_->Rows(positions);
  InterleavedRotary rotary;
  if (layer_pos_emb_.defined()) {
    rotary = (rotary_.defined() ? rotary_ : MakeInterleavedRotary(layer_pos_emb_)).Rows(positions);
  }
  x = performer_->Step(x, rotary, positions, state);
  positions.add_(1);
  return StepHead(x);
}

torch::Tensor PerformerLMImpl::StepHead(const torch::Tensor& x) {
  if (step_head_weight_.defined()) {
    FusedLinearOptions head;
    head.norm_weight = norm_->weight;
    head.norm_bias = norm_->bias;
    head.norm_eps = norm_->options.eps();
    if (!config_.tie_embed) head.bias = to_out_->bias;
    head.weight_scales = step_head_scales_;
    return FusedLinearRows(x, step_head_weight_, head);
  }
  torch::Tensor h = LayerNormRows(norm_, x);
  return config_.tie_embed ? LinearRows(token_emb_->weight, torch::Tensor(), h)
                           : LinearRows(to_out_, h);
}

torch::Tensor PerformerLMImpl::Extend(const torch::Tensor& tokens,
                                      const std::vector<SlotRows>& state,
                                      std::optional<int64_t> start) {
  const int64_t count = tokens.size(0);
  const torch::Tensor& state_positions = state.front().positions;
  TORCH_CHECK(count >= 1 && state_positions.size(0) == 1,
              "Extend feeds at least one token to exactly one sequence");
  // Embeddings and rotary rows index device tables: positions on the state's
  // device, computed there. The layers read only the first position (local
  // heads' window start), so they get the same positions on the host.
  torch::Tensor positions = state_positions + torch::arange(count, state_positions.options());
  const int64_t first = start.has_value() ? *start : state_positions[0].item<int64_t>();
  const torch::Tensor host_positions = torch::arange(first, first + count, torch::kLong);
  torch::Tensor x = token_emb_(tokens) + pos_emb_->Rows(positions);
  InterleavedRotary rotary;
  if (layer_pos_emb_.defined()) {
    rotary = (rotary_.defined() ? rotary_ : MakeInterleavedRotary(layer_pos_emb_)).Rows(positions);
  }
  x = performer_->Extend(x, rotary, host_positions, state);
  state_positions.add_(count);
  return StepHead(x.narrow(0, count - 1, 1).contiguous())[0];
}

void PerformerLMImpl::InitCross(const torch::Tensor& context, const torch::Tensor& context_mask,
                                const std::vector<SlotRows>& state) {
  performer_->InitCross(context, context_mask, state);
}

void PerformerLMImpl::PrepareForDecoding(const DecodeStepOptions& options) {
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = WeightScalarType(options.weight_dtype);
  ConvertLinearWeights({this}, dtype);
  if (layer_pos_emb_.defined()) rotary_ = MakeInterleavedRotary(layer_pos_emb_);
  const bool fused = options.UsesFusedStep(token_emb_->weight.is_cuda());
  performer_->PrepareForDecoding(options, fused);
  step_head_weight_ = step_head_scales_ = torch::Tensor();
  if (fused && config_.tie_embed) {
    const WeightMatrix head = CompactWeight(token_emb_->weight, dtype);
    step_head_weight_ = head.weight;
    step_head_scales_ = head.scales;
  } else if (fused) {
    step_head_weight_ = to_out_->weight;
    step_head_scales_ = LinearWeightScales(*to_out_);
  }
}

void PerformerLMImpl::AppendDecodeTensors(std::vector<torch::Tensor>* out) const {
  out->insert(out->end(), {step_head_weight_, step_head_scales_});
  performer_->AppendDecodeTensors(out);
}

std::vector<std::vector<SlotTensorSpec>> PerformerLMImpl::SlotStateSpecs() const {
  return performer_->SlotStateSpecs();
}

StatePool PerformerLMImpl::AllocateState(int64_t rows) const {
  const torch::Tensor& weight = token_emb_->weight;
  return StatePool(SlotStateSpecs(), rows,
                   torch::TensorOptions().device(weight.device()).dtype(weight.dtype()));
}

}  // namespace performer::models
