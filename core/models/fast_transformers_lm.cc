#include "core/models/fast_transformers_lm.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "core/attention/linear_rows.h"
#include "core/attention/linear_weights.h"
#include "core/builders/transformer_builders.h"
#include "core/feature_maps/feature_map.h"
#include "core/masks.h"
#include "core/transformers/make_mirror.h"

namespace performer::models {
namespace {

constexpr int64_t kMaxTokens = int64_t{1} << 24;
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxDimension = 65536;

absl::StatusOr<int64_t> BoundedInt(const nlohmann::json& object, const char* key, int64_t low,
                                   int64_t high, bool required) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
    return low;
  }
  if (!it->is_number_integer() || it->get<int64_t>() < low || it->get<int64_t>() > high) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be an integer in [", low,
                                                   ", ", high, "], got ", it->dump()));
  }
  return it->get<int64_t>();
}

// Every integer of `value` (a keyword argument, possibly nested) is within
// +-kMaxSeqLen: no builder parameter needs more, and sizes built from them
// stay far from overflow.
absl::Status BoundedIntegers(const nlohmann::json& value, const std::string& key) {
  if (value.is_number_integer()) {
    const bool negative = !value.is_number_unsigned() && value.get<int64_t>() < 0;
    const uint64_t magnitude = negative ? uint64_t{0} - static_cast<uint64_t>(value.get<int64_t>())
                                        : value.get<uint64_t>();
    if (magnitude > static_cast<uint64_t>(kMaxSeqLen)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", key, "\" must be within +-", kMaxSeqLen, ", got ", value.dump()));
    }
  }
  if (value.is_structured()) {
    for (const auto& item : value.items()) {
      const std::string inner = value.is_object() ? item.key() : key;
      if (absl::Status s = BoundedIntegers(item.value(), inner); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// {"type": "Favor", "n_dims": 16} -> {"factory": "Favor", "kwargs": {"n_dims": 16}}.
absl::StatusOr<nlohmann::json> LibraryFeatureMap(const nlohmann::json& spec) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"feature_map\" must be {\"type\": <class>, <keyword arguments>...}, got ", spec.dump()));
  }
  std::string type = spec["type"].get<std::string>();
  if (type == "elu") type = "elu_feature_map";
  nlohmann::json kwargs = nlohmann::json::object();
  for (const auto& item : spec.items()) {
    if (item.key() != "type") kwargs[item.key()] = item.value();
  }
  return nlohmann::json{{"factory", type}, {"kwargs", kwargs}};
}

// Random feature maps are sampled once (a new model is usable as built; a
// loaded one then gets its omega from the weights) and never again.
void SampleOnceAndFreezeFeatureMaps(torch::nn::Module& module) {
  for (const std::shared_ptr<torch::nn::Module>& m : module.modules(/*include_self=*/false)) {
    if (auto* map = dynamic_cast<FeatureMapImpl*>(m.get())) {
      map->new_feature_map(torch::kCPU);
      map->set_frozen(true);
    }
  }
}

}  // namespace

absl::StatusOr<FastTransformersLMConfig> ParseFastTransformersLMConfig(const nlohmann::json& json) {
  FastTransformersLMConfig config;
  absl::StatusOr<int64_t> tokens = BoundedInt(json, "num_tokens", 1, kMaxTokens, true);
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<int64_t> length = BoundedInt(json, "max_seq_len", 1, kMaxSeqLen, true);
  if (!length.ok()) return length.status();
  config.num_tokens = *tokens;
  config.max_seq_len = *length;
  auto encoder = json.find("encoder");
  if (encoder == json.end() || !encoder->is_object()) {
    return absl::InvalidArgumentError("missing \"encoder\": the builder's keyword arguments");
  }
  config.encoder = *encoder;
  if (absl::StatusOr<int64_t> layers = BoundedInt(*encoder, "n_layers", 1, kMaxLayers, false);
      !layers.ok()) {
    return layers.status();
  }
  for (const char* key : {"n_heads", "query_dimensions", "value_dimensions",
                          "feed_forward_dimensions", "model_dimensions"}) {
    if (absl::StatusOr<int64_t> d = BoundedInt(*encoder, key, 1, kMaxDimension, false); !d.ok()) {
      return d.status();
    }
  }
  if (absl::Status s = BoundedIntegers(*encoder, "encoder"); !s.ok()) return s;
  if (auto map = encoder->find("feature_map"); map != encoder->end() && !map->is_null()) {
    absl::StatusOr<nlohmann::json> library = LibraryFeatureMap(*map);
    if (!library.ok()) return library.status();
    config.encoder["feature_map"] = *library;
  }
  return config;
}

absl::StatusOr<uint64_t> MinimumParameterElements(const FastTransformersLMConfig& config) {
  absl::StatusOr<TransformerEncoderBuilder> builder =
      TransformerEncoderBuilder::FromJson(config.encoder);
  if (!builder.ok()) return builder.status();
  // Saturating: every factor is bounded by the parser, the sum is not.
  auto mul = [](uint64_t a, uint64_t b) {
    uint64_t out = 0;
    return __builtin_mul_overflow(a, b, &out) ? UINT64_MAX : out;
  };
  auto add = [](uint64_t a, uint64_t b) {
    uint64_t out = 0;
    return __builtin_add_overflow(a, b, &out) ? UINT64_MAX : out;
  };
  auto u = [](int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : uint64_t{0}; };
  const uint64_t d = u(builder->model_dimensions());
  // Token embedding, output projection, position embedding.
  uint64_t total = mul(d, add(mul(2, u(config.num_tokens)), u(config.max_seq_len)));
  const uint64_t feed_forward = mul(2, mul(d, u(builder->feed_forward_dimensions())));
  return add(total, mul(u(builder->n_layers()), feed_forward));
}

absl::StatusOr<std::shared_ptr<FastTransformersLMImpl>> FastTransformersLMImpl::Create(
    const FastTransformersLMConfig& config) {
  absl::StatusOr<TransformerEncoderBuilder> batch =
      TransformerEncoderBuilder::FromJson(config.encoder);
  if (!batch.ok()) return batch.status();
  absl::StatusOr<TransformerEncoderPtr> encoder = batch->Build();
  if (!encoder.ok()) return encoder.status();
  // The batch builder accepted the kwargs: a refusal of the recurrent one
  // means the attention has no recurrent twin.
  auto no_recurrent_form = [&](const absl::Status& why) {
    return absl::InvalidArgumentError(absl::StrCat("attention_type ", batch->attention_type(),
                                                   " has no recurrent form: ", why.message()));
  };
  absl::StatusOr<RecurrentEncoderBuilder> recurrent =
      RecurrentEncoderBuilder::FromJson(config.encoder);
  if (!recurrent.ok()) return no_recurrent_form(recurrent.status());
  absl::StatusOr<RecurrentTransformerEncoderPtr> twin = recurrent->Build();
  if (!twin.ok()) return no_recurrent_form(twin.status());
  return std::shared_ptr<FastTransformersLMImpl>(new FastTransformersLMImpl(
      config, batch->model_dimensions(), *std::move(encoder), *std::move(twin)));
}

FastTransformersLMImpl::FastTransformersLMImpl(const FastTransformersLMConfig& config,
                                               int64_t d_model, TransformerEncoderPtr batch_encoder,
                                               RecurrentTransformerEncoderPtr recurrent)
    : config_(config), recurrent_(std::move(recurrent)) {
  token_emb = register_module("token_emb", torch::nn::Embedding(config.num_tokens, d_model));
  pos_emb = register_module("pos_emb", torch::nn::Embedding(config.max_seq_len, d_model));
  encoder = register_module("encoder", std::move(batch_encoder));
  to_logits = register_module("to_logits", torch::nn::Linear(d_model, config.num_tokens));
  SampleOnceAndFreezeFeatureMaps(*this);
  SampleOnceAndFreezeFeatureMaps(*recurrent_);
}

torch::Tensor FastTransformersLMImpl::forward(const torch::Tensor& tokens) {
  const int64_t length = tokens.size(1);
  TORCH_CHECK(length <= config_.max_seq_len, "FastTransformersLM: ", length,
              " tokens pass max_seq_len ", config_.max_seq_len);
  torch::Tensor positions = torch::arange(length, tokens.options().dtype(torch::kLong));
  torch::Tensor x = token_emb->forward(tokens) + pos_emb->forward(positions);
  x = encoder->forward(x, Mask::TriangularCausal(length, tokens.device()));
  return ForwardLinear(to_logits, x);
}

void FastTransformersLMImpl::PrepareForDecoding(torch::ScalarType weight_dtype) {
  torch::NoGradGuard no_grad;
  recurrent_->to(token_emb->weight.device());
  absl::Status mirrored = MakeMirror(*encoder, *recurrent_);
  TORCH_CHECK(mirrored.ok(), "FastTransformersLM: the recurrent twin does not mirror the encoder: ",
              mirrored.message());
  torch::OrderedDict<std::string, torch::Tensor> twin_buffers = recurrent_->named_buffers();
  for (const auto& item : encoder->named_buffers()) {
    torch::Tensor* twin = twin_buffers.find(item.key());
    TORCH_CHECK(twin != nullptr, "FastTransformersLM: the recurrent twin has no buffer ",
                item.key());
    twin->copy_(item.value());
  }
  recurrent_->eval();
  // After mirroring: the twin's layers share the encoder's storage, so each
  // weight converts once and both hold the compact one.
  ConvertLinearWeights({this, recurrent_.get()}, weight_dtype);
}

std::vector<std::vector<SlotTensorSpec>> FastTransformersLMImpl::SlotStateSpecs() const {
  return recurrent_->SlotStateSpecs(config_.max_seq_len);
}

std::string FastTransformersLMImpl::SlotFormMissing() const {
  for (const RecurrentTransformerEncoderLayerPtr& layer : recurrent_->layers()) {
    if (layer->attention->SlotStateSpec(config_.max_seq_len).empty()) {
      return layer->attention->inner_attention()->class_name();
    }
  }
  return "";
}

torch::Tensor FastTransformersLMImpl::ForwardSlots(const torch::Tensor& tokens,
                                                   std::vector<SlotRows>& rows) {
  TORCH_CHECK(!rows.empty(), "FastTransformersLM::ForwardSlots needs the rows of every layer");
  const int64_t n = tokens.size(1);
  torch::Tensor& positions = rows.front().positions;
  torch::Tensor at = positions.unsqueeze(1) + torch::arange(n, positions.options());
  torch::Tensor x = token_emb->forward(tokens) + pos_emb->forward(at);
  torch::Tensor logits = ApplyLinear(to_logits, recurrent_->ForwardSlots(x, rows));
  positions.add_(n);
  return logits;
}

}  // namespace performer::models
