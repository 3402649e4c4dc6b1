#include "core/models/performer_stack.h"

#include <torch/nn/modules/container/modulelist.h>

namespace performer::models {
namespace {

BranchNorm NormOf(const PerformerLMConfig& c) {
  // ScaleNorm wins over ReZero when both are set
  // (docs/reference/performer-pytorch.md §1.1).
  if (c.use_scalenorm) return BranchNorm::kScaleNorm;
  if (c.use_rezero) return BranchNorm::kReZero;
  return BranchNorm::kLayerNorm;
}

}  // namespace

PerformerStackImpl::PerformerStackImpl(const PerformerLMConfig& config) : config_(config) {
  const BranchNorm norm = NormOf(config);
  auto attention = [&](bool cross, int64_t local_heads) {
    PerformerAttentionOptions o;
    o.dim = config.dim;
    o.causal = cross ? false : config.causal;
    o.heads = config.heads;
    o.dim_head = config.resolved_dim_head();
    o.local_heads = cross ? 0 : local_heads;
    o.local_window_size = config.local_window_size;
    o.nb_features = config.nb_features;
    o.generalized_attention = config.generalized_attention;
    o.kernel_fn = config.kernel_fn;
    o.no_projection = config.no_projection;
    o.qkv_bias = config.qkv_bias;
    o.attn_out_bias = config.attn_out_bias;
    o.dropout = config.attn_dropout;
    o.cross = cross;
    return PerformerAttention(o);
  };
  auto feed_forward = [&]() {
    return FeedForward(config.dim, config.ff_mult, config.ff_glu, config.ff_dropout);
  };
  for (int64_t i = 0; i < config.depth; ++i) {
    pairs_.emplace_back(
        Branch(config.dim, norm, config.shift_tokens, config.causal,
               attention(false, config.local_heads(i)), FeedForward(nullptr)),
        Branch(config.dim, norm, config.shift_tokens, config.causal, nullptr, feed_forward()));
    if (config.cross_attend) {
      // Token shift is never applied to the cross pair.
      pairs_.emplace_back(
          Branch(config.dim, norm, false, config.causal, attention(true, 0), FeedForward(nullptr)),
          Branch(config.dim, norm, false, config.causal, nullptr, feed_forward()));
    }
  }
  auto net = register_module("net", std::make_shared<torch::nn::Module>());
  if (config.reversible) {
    torch::nn::ModuleList blocks;
    for (auto& [f, g] : pairs_) {
      auto block = std::make_shared<torch::nn::Module>();
      block->register_module("f", std::make_shared<torch::nn::Module>())->register_module("net", f);
      block->register_module("g", std::make_shared<torch::nn::Module>())->register_module("net", g);
      blocks->push_back(block);
    }
    net->register_module("blocks", blocks);
  } else {
    torch::nn::ModuleList layers;
    for (auto& [f, g] : pairs_) {
      torch::nn::ModuleList pair;
      pair->push_back(f);
      pair->push_back(g);
      layers->push_back(pair);
    }
    net->register_module("layers", layers);
  }
}

std::vector<std::vector<SlotTensorSpec>> PerformerStackImpl::SlotStateSpecs() const {
  std::vector<std::vector<SlotTensorSpec>> specs;
  for (const auto& [f, g] : pairs_) {
    specs.push_back(f->SlotStateSpec());
    specs.push_back(g->SlotStateSpec());
  }
  return specs;
}

void PerformerStackImpl::CheckState(const std::vector<SlotRows>& state) const {
  TORCH_CHECK(state.size() == 2 * pairs_.size(), "PerformerStack: a state of ", state.size(),
              " branches for a stack of ", 2 * pairs_.size());
}

torch::Tensor PerformerStackImpl::forward(const torch::Tensor& x, const BranchInputs& in,
                                          const std::vector<SlotRows>* capture, DebugTrace* trace) {
  if (capture != nullptr) CheckState(*capture);
  BranchInputs ff_inputs;         // the feed-forward branch receives no routed arguments
  BranchInputs self_inputs = in;  // context and context_mask reach only cross attention
  self_inputs.context = torch::Tensor();
  self_inputs.context_mask = torch::Tensor();
  torch::Tensor x1 = x, x2 = x;
  for (size_t i = 0; i < pairs_.size(); ++i) {
    auto& [f, g] = pairs_[i];
    torch::TensorList f_capture, g_capture;
    if (capture != nullptr) {
      f_capture = (*capture)[2 * i].tensors;
      g_capture = (*capture)[2 * i + 1].tensors;
    }
    torch::Tensor a, b;
    if (config_.reversible) {
      a = f(x2, f->is_cross() ? in : self_inputs, f_capture);
      x1 = x1 + a;
      b = g(x1, ff_inputs, g_capture);
      x2 = x2 + b;
    } else {
      a = f(x1, f->is_cross() ? in : self_inputs, f_capture);
      x1 = x1 + a;
      b = g(x1, ff_inputs, g_capture);
      x1 = x1 + b;
    }
    if (trace != nullptr) {
      (*trace)["layers." + std::to_string(i) + ".attn_branch"] = a;
      (*trace)["layers." + std::to_string(i) + ".ff_branch"] = b;
    }
  }
  return config_.reversible ? x1 + x2 : x1;
}

void PerformerStackImpl::PrepareForDecoding(const DecodeStepOptions& options, bool fused) {
  for (auto& [f, g] : pairs_) {
    f->PrepareForDecoding(options);
    g->PrepareForDecoding(options);
  }
  fused_step_ = fused && !config_.reversible;
}

void PerformerStackImpl::AppendDecodeTensors(std::vector<torch::Tensor>* out) const {
  for (const auto& [f, g] : pairs_) {
    f->AppendDecodeTensors(out);
    g->AppendDecodeTensors(out);
  }
}

torch::Tensor PerformerStackImpl::Incremental(BranchCall call, const torch::Tensor& x,
                                              const InterleavedRotary& rotary,
                                              const torch::Tensor& positions,
                                              const std::vector<SlotRows>& state) {
  CheckState(state);
  torch::Tensor x1 = x, x2 = x;
  for (size_t i = 0; i < pairs_.size(); ++i) {
    BranchImpl& f = *pairs_[i].first;
    BranchImpl& g = *pairs_[i].second;
    const std::vector<torch::Tensor>& f_state = state[2 * i].tensors;
    const std::vector<torch::Tensor>& g_state = state[2 * i + 1].tensors;
    if (config_.reversible) {
      x1 = x1 + (f.*call)(x2, rotary, positions, f_state);
      x2 = x2 + (g.*call)(x1, rotary, positions, g_state);
    } else {
      x1 = x1 + (f.*call)(x1, rotary, positions, f_state);
      x1 = x1 + (g.*call)(x1, rotary, positions, g_state);
    }
  }
  return config_.reversible ? x1 + x2 : x1;
}

torch::Tensor PerformerStackImpl::FusedLayers(const torch::Tensor& x,
                                              const InterleavedRotary& rotary,
                                              const torch::Tensor& positions,
                                              const std::vector<SlotRows>& state, bool chunk) {
  CheckState(state);
  const BranchCall separate = chunk ? &BranchImpl::Extend : &BranchImpl::Step;
  torch::Tensor h = x;
  for (size_t i = 0; i < pairs_.size(); ++i) {
    for (int side = 0; side < 2; ++side) {
      BranchImpl& branch = side == 0 ? *pairs_[i].first : *pairs_[i].second;
      const std::vector<torch::Tensor>& s = state[2 * i + side].tensors;
      h = branch.fuses_step() ? branch.StepWithResidual(h, rotary, positions, s, chunk)
                              : h + (branch.*separate)(h, rotary, positions, s);
    }
  }
  return h;
}

torch::Tensor PerformerStackImpl::Step(const torch::Tensor& x, const InterleavedRotary& rotary,
                                       const torch::Tensor& positions,
                                       const std::vector<SlotRows>& state) {
  if (!fused_step_) return Incremental(&BranchImpl::Step, x, rotary, positions, state);
  return FusedLayers(x, rotary, positions, state, /*chunk=*/false);
}

torch::Tensor PerformerStackImpl::Extend(const torch::Tensor& x, const InterleavedRotary& rotary,
                                         const torch::Tensor& positions,
                                         const std::vector<SlotRows>& state) {
  // The same wiring as Step, so that a chunk's rows get the steps' bits.
  if (!fused_step_) return Incremental(&BranchImpl::Extend, x, rotary, positions, state);
  return FusedLayers(x, rotary, positions, state, /*chunk=*/true);
}

void PerformerStackImpl::InitCross(const torch::Tensor& context, const torch::Tensor& context_mask,
                                   const std::vector<SlotRows>& state) {
  CheckState(state);
  for (size_t i = 0; i < pairs_.size(); ++i) {
    Branch& f = pairs_[i].first;
    if (f->is_cross()) {
      state[2 * i].tensors.front().copy_(f->attention()->SummarizeContext(context, context_mask));
    }
  }
}

}  // namespace performer::models
