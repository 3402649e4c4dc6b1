#include "core/attention/clustered_attention.h"

#include <torch/torch.h>

#include <memory>
#include <utility>

#include "core/attention/query_clustering.h"
#include "core/registry/param_spec.h"

namespace performer {

ClusteredAttentionImpl::ClusteredAttentionImpl(ClusteredAttentionOptions options)
    : options_(std::move(options)) {
  TORCH_CHECK(options_.clusters >= 1, "ClusteredAttention: clusters must be >= 1, got ",
              options_.clusters);
  TORCH_CHECK(options_.iterations >= 0, "ClusteredAttention: iterations must be >= 0, got ",
              options_.iterations);
  TORCH_CHECK(options_.bits >= 1 && options_.bits <= 63,
              "ClusteredAttention: bits must be in [1, 63], got ", options_.bits);
  dropout_ = register_module("dropout", torch::nn::Dropout(options_.attention_dropout));
}

torch::Tensor ClusteredAttentionImpl::forward(const torch::Tensor& queries,
                                              const torch::Tensor& keys,
                                              const torch::Tensor& values, const Mask& attn_mask,
                                              const Mask& query_lengths, const Mask& key_lengths) {
  constexpr const char* kName = "ClusteredAttention";
  TORCH_CHECK(attn_mask.all_ones(), kName,
              " cannot use an arbitrary attention mask (attn_mask must be all ones)");
  CheckClusteredAttentionInputs(kName, queries, keys, values, key_lengths, options_.clusters);
  const int64_t batch = queries.size(0);
  const int64_t keys_length = keys.size(1);
  torch::Tensor lengths = QueryLengthsOf(kName, query_lengths, batch, queries.size(1));
  const double temperature = SoftmaxTemperature(options_.softmax_temp, queries.size(3));

  torch::Tensor q = queries.permute({0, 2, 1, 3});  // (N, H, L, E)
  torch::Tensor k = keys.permute({0, 2, 1, 3});     // (N, H, S, E)
  torch::Tensor v = values.permute({0, 2, 1, 3});   // (N, H, S, D)
  QueryClusters clusters = ClusterQueries(
      q, lengths, {options_.clusters, options_.iterations, options_.bits, options_.hash_bias});
  torch::Tensor centroids = ClusterCentroids(q, clusters);  // (N, H, C, E)

  torch::Tensor key_add = key_lengths.additive_matrix()
                              .to(q.device(), q.scalar_type())
                              .view({batch, 1, 1, keys_length});
  torch::Tensor scores = torch::matmul(centroids, k.transpose(-2, -1)) + key_add;
  torch::Tensor attention = dropout_(torch::softmax(temperature * scores, -1));
  torch::Tensor per_cluster = torch::matmul(attention, v);  // (N, H, C, D)
  return BroadcastToQueries(per_cluster, clusters).permute({0, 2, 1, 3}).contiguous();
}

std::optional<ParamValue> ClusteredAttentionImpl::attribute(const std::string& name) const {
  if (name == "clusters") return ParamValue(options_.clusters);
  if (name == "iterations") return ParamValue(options_.iterations);
  if (name == "bits") return ParamValue(options_.bits);
  if (name == "hash_bias") return ParamValue(options_.hash_bias);
  if (name == "softmax_temp") {
    return options_.softmax_temp ? ParamValue(*options_.softmax_temp) : ParamValue();
  }
  if (name == "dropout.p") return ParamValue(dropout_->options.p());
  if (name == "event_dispatcher") return ParamValue(options_.event_dispatcher);
  return std::nullopt;
}

absl::Status RegisterClusteredAttention(AttentionRegistry& registry) {
  return registry.Register(
      "clustered", "ClusteredAttention",
      {{"clusters", IntSpec()},
       {"iterations", OptionalSpec(IntSpec(), int64_t{10})},
       {"bits", OptionalSpec(IntSpec(), int64_t{63})},
       {"hash_bias", OptionalSpec(BoolSpec(), true)},
       {"softmax_temp", OptionalSpec(FloatSpec())},
       {"attention_dropout", OptionalSpec(FloatSpec(), 0.1)},
       {"event_dispatcher", OptionalSpec(EventDispatcherInstanceSpec(), "")}},
      [](const std::vector<AttentionPtr>&, const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
        ClusteredAttentionOptions options;
        options.clusters = params.at("clusters").as_int();
        options.iterations = params.at("iterations").as_int();
        options.bits = params.at("bits").as_int();
        options.hash_bias = params.at("hash_bias").as_bool();
        const ParamValue& temp = params.at("softmax_temp");
        if (!temp.is_none()) options.softmax_temp = temp.as_float();
        options.attention_dropout = params.at("attention_dropout").as_float();
        options.event_dispatcher = params.at("event_dispatcher").as_string();
        try {
          return std::make_shared<ClusteredAttentionImpl>(std::move(options));
        } catch (const c10::Error& e) {
          return absl::InvalidArgumentError(e.what_without_backtrace());
        }
      });
}

}  // namespace performer
