// Registration of the built-in attention types in the reference's order, and
// the process-wide registries.
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "core/attention/aft_full_attention.h"
#include "core/attention/aft_simple_attention.h"
#include "core/attention/attention_registries.h"
#include "core/attention/causal_linear_attention.h"
#include "core/attention/clustered_attention.h"
#include "core/attention/conditional_full_attention.h"
#include "core/attention/exact_topk_attention.h"
#include "core/attention/full_attention.h"
#include "core/attention/improved_clustered_attention.h"
#include "core/attention/improved_clustered_causal_attention.h"
#include "core/attention/linear_attention.h"
#include "core/attention/local_attention.h"
#include "core/attention/reformer_attention.h"
#include "core/recurrent/recurrent_full_attention.h"
#include "core/recurrent/recurrent_linear_attention.h"

namespace performer {

absl::Status RegisterBuiltinAttentions(AttentionRegistry& attention,
                                       RecurrentAttentionRegistry& recurrent,
                                       RecurrentCrossAttentionRegistry& recurrent_cross) {
  // Batch attentions, in the order of the reference's AttentionRegistry.keys.
  const std::vector<std::function<absl::Status(AttentionRegistry&)>> batch = {
      RegisterFullAttention,
      RegisterLinearAttention,
      RegisterCausalLinearAttention,
      RegisterClusteredAttention,
      RegisterImprovedClusteredAttention,
      RegisterReformerAttention,
      RegisterConditionalFullAttention,
      RegisterExactTopKAttention,
      RegisterImprovedClusteredCausalAttention,
      RegisterLocalAttention,
      RegisterAFTFullAttention,
      RegisterAFTSimpleAttention,
  };
  for (const auto& register_type : batch) {
    absl::Status status = register_type(attention);
    if (!status.ok()) return status;
  }

  // Recurrent self attentions: "full", then "linear" and "causal-linear"
  // (one class under two names).
  absl::Status status = RegisterRecurrentFullAttention(recurrent);
  if (status.ok()) status = RegisterRecurrentLinearAttention(recurrent);
  // Recurrent cross attentions: "full", "linear".
  if (status.ok()) status = RegisterRecurrentCrossFullAttention(recurrent_cross);
  if (status.ok()) status = RegisterRecurrentCrossLinearAttention(recurrent_cross);
  return status;
}

namespace {

struct GlobalRegistries {
  AttentionRegistry attention;
  RecurrentAttentionRegistry recurrent;
  RecurrentCrossAttentionRegistry recurrent_cross;
};

// Built once, on first use (thread-safe static initialisation); never freed.
GlobalRegistries& Globals() {
  static GlobalRegistries* const registries = [] {
    auto* r = new GlobalRegistries();
    absl::Status status = RegisterBuiltinAttentions(r->attention, r->recurrent, r->recurrent_cross);
    TORCH_CHECK(status.ok(), "registering the built-in attentions failed: ", status.ToString());
    return r;
  }();
  return *registries;
}

}  // namespace

AttentionRegistry& GlobalAttentionRegistry() { return Globals().attention; }
RecurrentAttentionRegistry& GlobalRecurrentAttentionRegistry() { return Globals().recurrent; }
RecurrentCrossAttentionRegistry& GlobalRecurrentCrossAttentionRegistry() {
  return Globals().recurrent_cross;
}

}  // namespace performer
