#include "core/models/performer_attention.h"

#include "core/attention/linear_rows.h"
#include "core/attention/linear_weights.h"
#include "core/attention/rotary.h"
#include "core/models/model_weights.h"

namespace performer::models {

PerformerAttentionImpl::PerformerAttentionImpl(const PerformerAttentionOptions& options)
    : options_(options) {
  FastAttentionConfig fast;
  fast.dim_heads = options.dim_head;
  fast.nb_features = options.nb_features;
  fast.causal = options.causal;
  fast.generalized_attention = options.generalized_attention;
  fast.kernel_fn = options.kernel_fn;
  fast.no_projection = options.no_projection;
  // The reference builds FastAttention (and its projection buffer) even when
  // every head of the layer is local.
  fast_attention_ = register_module("fast_attention", FastAttention(fast));
  if (options.local_heads > 0) {
    local_attn_ = register_module(
        "local_attn", WindowedLocalAttention(options.dim_head, options.local_window_size,
                                             options.causal, options.dropout));
  }
  const int64_t inner = options.heads * options.dim_head;
  to_q_ = register_module(
      "to_q",
      torch::nn::Linear(torch::nn::LinearOptions(options.dim, inner).bias(options.qkv_bias)));
  to_k_ = register_module(
      "to_k",
      torch::nn::Linear(torch::nn::LinearOptions(options.dim, inner).bias(options.qkv_bias)));
  to_v_ = register_module(
      "to_v",
      torch::nn::Linear(torch::nn::LinearOptions(options.dim, inner).bias(options.qkv_bias)));
  to_out_ = register_module(
      "to_out",
      torch::nn::Linear(torch::nn::LinearOptions(inner, options.dim).bias(options.attn_out_bias)));
  if (!options.cross && global_heads() > 0) {
    fast_state_tensors_ = fast_attention_->SlotStateSpec(global_heads()).size();
  }
}

std::vector<SlotTensorSpec> PerformerAttentionImpl::SlotStateSpec() const {
  const int64_t d = options_.dim_head;
  if (options_.cross) {
    return {{{options_.heads, fast_attention_->feature_dim(), d + 1}, 0.0}};
  }
  std::vector<SlotTensorSpec> specs;
  if (global_heads() > 0) specs = fast_attention_->SlotStateSpec(global_heads());
  if (options_.local_heads > 0) {
    const SlotTensorSpec ring{{options_.local_heads, 2 * options_.local_window_size, d}, 0.0};
    specs.push_back(ring);
    specs.push_back(ring);
  }
  return specs;
}

torch::TensorList PerformerAttentionImpl::FastState(torch::TensorList state) const {
  return state.slice(0, fast_state_tensors_);
}

const torch::Tensor& PerformerAttentionImpl::RingKeys(torch::TensorList state) const {
  return state[fast_state_tensors_];
}

const torch::Tensor& PerformerAttentionImpl::RingValues(torch::TensorList state) const {
  return state[fast_state_tensors_ + 1];
}

torch::Tensor PerformerAttentionImpl::SplitHeads(const torch::Tensor& t) const {
  return t.view({t.size(0), t.size(1), options_.heads, options_.dim_head}).transpose(1, 2);
}

torch::Tensor PerformerAttentionImpl::MergeHeads(const torch::Tensor& t) const {
  return t.transpose(1, 2).reshape({t.size(0), t.size(2), options_.heads * options_.dim_head});
}

torch::Tensor PerformerAttentionImpl::forward(
    const torch::Tensor& x, const InterleavedRotary& rotary, const torch::Tensor& mask,
    const torch::Tensor& context, const torch::Tensor& context_mask, torch::TensorList capture) {
  TORCH_CHECK(!options_.cross || context.defined(), "cross attention needs a context");
  TORCH_CHECK(options_.cross || !context.defined(), "self attention does not take a context");
  const torch::Tensor& source = options_.cross ? context : x;
  torch::Tensor q = SplitHeads(ApplyLinear(to_q_, x));
  torch::Tensor k = SplitHeads(ApplyLinear(to_k_, source));
  torch::Tensor v = SplitHeads(ApplyLinear(to_v_, source));
  const int64_t gh = global_heads(), lh = options_.local_heads;
  std::vector<torch::Tensor> outs;
  if (gh > 0) {
    torch::Tensor qg = q.narrow(1, 0, gh), kg = k.narrow(1, 0, gh), vg = v.narrow(1, 0, gh);
    const torch::Tensor& key_mask = options_.cross ? context_mask : mask;
    if (key_mask.defined()) {
      vg = vg.masked_fill(key_mask.to(torch::kBool).logical_not().unsqueeze(1).unsqueeze(-1), 0.0);
    }
    if (rotary.defined() && !options_.cross) {
      qg = ApplyInterleavedRotary(qg, rotary);
      kg = ApplyInterleavedRotary(kg, rotary);
    }
    outs.push_back(fast_attention_(qg, kg, vg, capture.empty() ? capture : FastState(capture)));
  }
  if (lh > 0) {
    TORCH_CHECK(!options_.cross, "local attention is not compatible with cross attention");
    torch::Tensor lq = q.narrow(1, gh, lh), lk = k.narrow(1, gh, lh), lv = v.narrow(1, gh, lh);
    outs.push_back(local_attn_(lq, lk, lv, mask));
    if (!capture.empty()) local_attn_->InitRing(lk, lv, RingKeys(capture), RingValues(capture));
  }
  torch::Tensor out =
      ApplyLinear(to_out_, MergeHeads(outs.size() == 1 ? outs[0] : torch::cat(outs, 1)));
  if (options_.dropout > 0.0 && is_training()) out = torch::dropout(out, options_.dropout, true);
  return out;
}

void PerformerAttentionImpl::PrepareForDecoding(const DecodeStepOptions& options) {
  torch::NoGradGuard no_grad;
  ConvertLinearWeights({this}, WeightScalarType(options.weight_dtype));
  const std::vector<torch::nn::Linear> qkv = {to_q_, to_k_, to_v_};
  std::vector<torch::Tensor> weights, scales;
  for (const torch::nn::Linear& layer : qkv) {
    weights.push_back(layer->weight);
    scales.push_back(LinearWeightScales(*layer));
  }
  qkv_weight_ = torch::cat(weights, 0).contiguous();
  qkv_scales_ = scales.front().defined() ? torch::cat(scales, 0).contiguous() : torch::Tensor();
  int64_t row = 0;
  for (size_t i = 0; i < qkv.size(); ++i) {
    const int64_t rows = weights[i].size(0);
    weights[i].set_data(qkv_weight_.narrow(0, row, rows));
    if (qkv_scales_.defined()) scales[i].set_data(qkv_scales_.narrow(0, row, rows));
    row += rows;
  }
  if (options_.qkv_bias) qkv_bias_ = torch::cat({to_q_->bias, to_k_->bias, to_v_->bias}, 0);
  out_scales_ = LinearWeightScales(*to_out_);
  fast_attention_->PrepareForDecoding(options.favor_projection_in_step);
  if (!local_attn_.is_empty()) local_attn_->PrepareForDecoding();
}

torch::Tensor PerformerAttentionImpl::ProjectQkv(const torch::Tensor& x) {
  const int64_t rows = x.size(0), h = options_.heads, d = options_.dim_head;
  if (qkv_weight_.defined()) {
    return LinearRows(qkv_weight_, qkv_bias_, x, qkv_scales_).view({rows, 3, h, d});
  }
  return torch::stack({LinearRows(to_q_, x), LinearRows(to_k_, x), LinearRows(to_v_, x)}, 1)
      .view({rows, 3, h, d});
}

torch::Tensor PerformerAttentionImpl::GlobalQueriesKeys(const torch::Tensor& qkv,
                                                        const InterleavedRotary& rotary) const {
  const int64_t rows = qkv.size(0), gh = global_heads(), h = options_.heads;
  const int64_t d = options_.dim_head;
  if (gh == 0) return torch::Tensor();
  // [B, 2 gh, d]: the global query heads, then the global key heads (a view
  // when every head is global).
  torch::Tensor qk = gh == h ? qkv.narrow(1, 0, 2).reshape({rows, 2 * h, d})
                             : qkv.narrow(1, 0, 2).narrow(2, 0, gh).reshape({rows, 2 * gh, d});
  if (rotary.defined()) qk = ApplyInterleavedRotary(qk, rotary.Unsqueeze(1));
  return qk;
}

torch::Tensor PerformerAttentionImpl::Recur(const torch::Tensor& qkv, const torch::Tensor& qk,
                                            const torch::Tensor& positions,
                                            torch::TensorList state) {
  const int64_t gh = global_heads(), lh = options_.local_heads;
  std::vector<torch::Tensor> outs;
  if (gh > 0) {
    outs.push_back(fast_attention_->Step(qk, qkv.select(1, 2).narrow(1, 0, gh), FastState(state)));
  }
  if (lh > 0) {
    outs.push_back(local_attn_->Step(
        qkv.select(1, 0).narrow(1, gh, lh), qkv.select(1, 1).narrow(1, gh, lh),
        qkv.select(1, 2).narrow(1, gh, lh), positions, RingKeys(state), RingValues(state)));
  }
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 1);
}

torch::Tensor PerformerAttentionImpl::Step(const torch::Tensor& x, const InterleavedRotary& rotary,
                                           const torch::Tensor& positions,
                                           torch::TensorList state) {
  const int64_t rows = x.size(0), inner = options_.heads * options_.dim_head;
  torch::Tensor qkv = ProjectQkv(x);
  torch::Tensor out = Recur(qkv, GlobalQueriesKeys(qkv, rotary), positions, state);
  return LinearRows(to_out_, out.reshape({rows, inner}));
}

torch::Tensor PerformerAttentionImpl::FusedStep(const torch::Tensor& x,
                                                const FusedLinearOptions& norm,
                                                const InterleavedRotary& rotary,
                                                const torch::Tensor& positions,
                                                torch::TensorList state, bool chunk) {
  TORCH_CHECK(qkv_weight_.defined(), "PerformerAttention::FusedStep needs PrepareForDecoding");
  const int64_t rows = x.size(0), inner = options_.heads * options_.dim_head;
  FusedLinearOptions project = norm;
  project.bias = qkv_bias_;
  project.weight_scales = qkv_scales_;
  torch::Tensor qkv =
      FusedLinearRows(x, qkv_weight_, project).view({rows, 3, options_.heads, options_.dim_head});
  torch::Tensor out = chunk ? ExtendMix(qkv, rotary, positions, state)
                            : Recur(qkv, GlobalQueriesKeys(qkv, rotary), positions, state);
  FusedLinearOptions merge;
  if (options_.attn_out_bias) merge.bias = to_out_->bias;
  merge.residual = x;
  merge.weight_scales = out_scales_;
  return FusedLinearRows(out.reshape({rows, inner}), to_out_->weight, merge);
}

torch::Tensor PerformerAttentionImpl::ExtendMix(const torch::Tensor& qkv,
                                                const InterleavedRotary& rotary,
                                                const torch::Tensor& positions,
                                                torch::TensorList state) {
  const int64_t gh = global_heads(), lh = options_.local_heads;
  std::vector<torch::Tensor> outs;
  // [count, heads, d] <-> [1, heads, count, d].
  auto heads_first = [](const torch::Tensor& t) { return t.transpose(0, 1).unsqueeze(0); };
  if (gh > 0) {
    torch::Tensor qk = GlobalQueriesKeys(qkv, rotary);
    torch::Tensor v = qkv.select(1, 2).narrow(1, 0, gh);
    if (fast_attention_->ScanSupported(FastState(state))) {
      // Token by token, as the steps run them (the same bits).
      outs.push_back(
          fast_attention_->Scan(qk.unsqueeze(0), v.unsqueeze(0), FastState(state)).squeeze(0));
    } else {
      // One chunkwise prefill from the state.
      torch::Tensor out = fast_attention_->Extend(heads_first(qk.narrow(1, 0, gh)),
                                                  heads_first(qk.narrow(1, gh, gh)), heads_first(v),
                                                  FastState(state));
      outs.push_back(out.squeeze(0).transpose(0, 1));
    }
  }
  if (lh > 0) {
    // Local heads: the chunk against the ring's keys.
    const int64_t start = positions[0].item<int64_t>();
    torch::Tensor out = local_attn_->Extend(heads_first(qkv.select(1, 0).narrow(1, gh, lh)),
                                            heads_first(qkv.select(1, 1).narrow(1, gh, lh)),
                                            heads_first(qkv.select(1, 2).narrow(1, gh, lh)), start,
                                            RingKeys(state), RingValues(state));
    outs.push_back(out.squeeze(0).transpose(0, 1));
  }
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 1);
}

torch::Tensor PerformerAttentionImpl::Extend(const torch::Tensor& x,
                                             const InterleavedRotary& rotary,
                                             const torch::Tensor& positions,
                                             torch::TensorList state) {
  const int64_t count = x.size(0), inner = options_.heads * options_.dim_head;
  torch::Tensor out = ExtendMix(ProjectQkv(x), rotary, positions, state);
  return LinearRows(to_out_, out.reshape({count, inner}));
}

torch::Tensor PerformerAttentionImpl::SummarizeContext(const torch::Tensor& context,
                                                       const torch::Tensor& context_mask) {
  torch::Tensor k = SplitHeads(ForwardLinear(to_k_, context));
  torch::Tensor v = SplitHeads(ForwardLinear(to_v_, context));
  if (context_mask.defined()) {
    v = v.masked_fill(context_mask.to(torch::kBool).logical_not().unsqueeze(1).unsqueeze(-1), 0.0);
  }
  return fast_attention_->Summarize(k, v);
}

void PerformerAttentionImpl::PrepareCrossForDecoding() { fast_attention_->PrepareForDecoding(); }

torch::Tensor PerformerAttentionImpl::CrossStep(const torch::Tensor& x,
                                                const torch::Tensor& summary) {
  const int64_t rows = x.size(0), h = options_.heads, d = options_.dim_head;
  torch::Tensor q = LinearRows(to_q_, x).view({rows, h, d});
  return LinearRows(to_out_, fast_attention_->AttendSummary(q, summary).reshape({rows, h * d}));
}

}  // namespace performer::models
