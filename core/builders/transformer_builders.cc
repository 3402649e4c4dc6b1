#include "core/builders/transformer_builders.h"

#include <torch/torch.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "core/registry/param_spec.h"

namespace performer {
namespace {

template <typename Json>
absl::StatusOr<ParamItems> ItemsFromJson(const Json& kwargs, bool* strict) {
  if (kwargs.is_null()) return ParamItems{};
  if (!kwargs.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("builder keyword arguments must be a JSON object, got ", kwargs.dump()));
  }
  ParamItems items;
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    const std::string& key = it.key();
    const Json& value = it.value();
    if (key == "strict") {
      // Python's `if strict:` truthiness (None and 0 are non-strict).
      const nlohmann::json plain = nlohmann::json::parse(value.dump());
      ParamValue flag;
      const bool truthy = ParamValueFromJsonScalar(plain, &flag)
                              ? BoolSpec()->Get(flag).value_or(ParamValue(true)).as_bool()
                              : !plain.empty();
      if (strict != nullptr) *strict = truthy;
      continue;
    }
    // The catalogue and the scalar conversion take plain (sorted) JSON.
    absl::StatusOr<ParamValue> converted =
        AttentionParamFromJson(key, nlohmann::json::parse(value.dump()));
    if (!converted.ok()) return converted.status();
    items.emplace_back(key, *std::move(converted));
  }
  return items;
}

template <typename Builder>
absl::StatusOr<Builder> BuilderFromDictionary(const ParamItems& items, bool strict) {
  Builder builder;
  for (const auto& [name, value] : items) {
    absl::Status status = builder.Set(name, value);
    if (absl::IsNotFound(status)) {
      if (strict) {
        return absl::InvalidArgumentError(
            absl::StrCat("The builder has no parameter '", name, "'"));
      }
      continue;
    }
    if (!status.ok()) return status;
  }
  return builder;
}

template <typename Builder, typename Json>
absl::StatusOr<Builder> BuilderFromJson(const Json& kwargs, bool strict) {
  absl::StatusOr<ParamItems> items = ParamItemsFromJson(kwargs, &strict);
  if (!items.ok()) return items.status();
  return BuilderFromDictionary<Builder>(*items, strict);
}

absl::Status InvalidValue(const std::string& name, const ParamValue& value) {
  return absl::InvalidArgumentError(
      absl::StrCat("Invalid value ", value.Repr(), " for parameter '", name, "'"));
}

absl::Status NoSuchAttribute(const std::string& owner, const std::string& name) {
  return absl::NotFoundError(absl::StrCat("'", owner, "' object has no attribute '", name, "'"));
}

const std::set<std::string>& CommonProperties() {
  static const auto* names =
      new std::set<std::string>{"n_layers",         "n_heads",          "feed_forward_dimensions",
                                "query_dimensions", "value_dimensions", "model_dimensions",
                                "dropout",          "activation",       "final_normalization",
                                "event_dispatcher"};
  return *names;
}

}  // namespace

absl::StatusOr<ParamItems> ParamItemsFromJson(const nlohmann::json& kwargs, bool* strict) {
  return ItemsFromJson(kwargs, strict);
}

absl::StatusOr<ParamItems> ParamItemsFromJson(const nlohmann::ordered_json& kwargs, bool* strict) {
  return ItemsFromJson(kwargs, strict);
}

// ---------------------------------------------------------------------------
// TransformerBuilderBase

absl::StatusOr<int64_t> TransformerBuilderBase::ToInt(const std::string& name,
                                                      const ParamValue& value) {
  absl::StatusOr<ParamValue> v = IntSpec()->Get(value);
  if (!v.ok()) return InvalidValue(name, value);
  return v->as_int();
}

absl::StatusOr<std::optional<int64_t>> TransformerBuilderBase::ToOptionalInt(
    const std::string& name, const ParamValue& value) {
  if (value.is_none()) return std::optional<int64_t>();
  absl::StatusOr<int64_t> v = ToInt(name, value);
  if (!v.ok()) return v.status();
  return std::optional<int64_t>(*v);
}

absl::StatusOr<std::string> TransformerBuilderBase::ToString(const std::string& name,
                                                             const ParamValue& value) {
  if (!value.is_string()) return InvalidValue(name, value);
  return value.as_string();
}

absl::Status TransformerBuilderBase::NotAString(const ParamValue& value) {
  const char* type = value.is_none()    ? "NoneType"
                     : value.is_bool()  ? "bool"
                     : value.is_int()   ? "int"
                     : value.is_float() ? "float"
                                        : "function";
  return absl::NotFoundError(absl::StrCat("'", type, "' object has no attribute 'split'"));
}

bool TransformerBuilderBase::HasProperty(const std::string& name) const {
  return CommonProperties().count(name) > 0;
}

absl::Status TransformerBuilderBase::Set(const std::string& name, const ParamValue& value) {
  if (name.empty()) return NoSuchAttribute(class_name(), name);
  if (name[0] == '_') {
    for (auto& [key, stored] : private_attributes_) {
      if (key == name) {
        stored = value;
        return absl::OkStatus();
      }
    }
    private_attributes_.emplace_back(name, value);
    return absl::OkStatus();
  }
  if (HasProperty(name)) {
    if (IsAttentionBuilderProperty(name)) {
      return absl::NotFoundError(
          absl::StrCat("property '", name, "' of '", class_name(), "' object has no setter"));
    }
    absl::Status status = SetProperty(name, value);
    if (!status.ok()) return status;
    // A property may also be an attention parameter (query_dimensions,
    // event_dispatcher): try it there, silently.
    SetOnAttentionBuilders(name, value).IgnoreError();
    return absl::OkStatus();
  }
  return SetOnAttentionBuilders(name, value);
}

absl::StatusOr<ParamValue> TransformerBuilderBase::Get(const std::string& name) const {
  const size_t dot = name.find('.');
  if (dot != std::string::npos) {
    const std::string owner = name.substr(0, dot);
    if (!IsAttentionBuilderProperty(owner)) {
      if (HasProperty(owner)) {
        return absl::NotFoundError(absl::StrCat("property '", owner, "' of '", class_name(),
                                                "' has no attribute '", name.substr(dot + 1), "'"));
      }
      return NoSuchAttribute(class_name(), owner);
    }
    return GetFromAttentionBuilder(owner, name.substr(dot + 1));
  }
  if (!name.empty() && name[0] == '_') {
    for (const auto& [key, stored] : private_attributes_) {
      if (key == name) return stored;
    }
    return NoSuchAttribute(class_name(), name);
  }
  if (!HasProperty(name)) return NoSuchAttribute(class_name(), name);
  if (IsAttentionBuilderProperty(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is an attention builder, not a value; read its parameters as '",
                     name, ".<parameter>'"));
  }
  return GetProperty(name);
}

absl::Status TransformerBuilderBase::SetProperty(const std::string& name, const ParamValue& value) {
  if (name == "n_layers" || name == "n_heads" || name == "feed_forward_dimensions" ||
      name == "query_dimensions" || name == "value_dimensions") {
    absl::StatusOr<int64_t> v = ToInt(name, value);
    if (!v.ok()) return v.status();
    if (name == "n_layers") n_layers_ = *v;
    if (name == "n_heads") n_heads_ = *v;
    if (name == "feed_forward_dimensions") feed_forward_dimensions_ = *v;
    if (name == "query_dimensions") query_dimensions_ = *v;
    if (name == "value_dimensions") value_dimensions_ = *v;
    return absl::OkStatus();
  }
  if (name == "model_dimensions") {
    absl::StatusOr<std::optional<int64_t>> v = ToOptionalInt(name, value);
    if (!v.ok()) return v.status();
    model_dimensions_ = *v;
    return absl::OkStatus();
  }
  if (name == "dropout") {
    absl::StatusOr<ParamValue> v = FloatSpec()->Get(value);
    if (!v.ok()) return InvalidValue(name, value);
    dropout_ = v->as_float();
    return absl::OkStatus();
  }
  if (name == "activation") {
    if (!value.is_string() || (value.as_string() != "relu" && value.as_string() != "gelu")) {
      // The reference's message, typo included.
      return absl::InvalidArgumentError(absl::StrCat(
          value.Repr(), " is not one of the availabel activation types ['relu', 'gelu']"));
    }
    activation_ = value.as_string();
    return absl::OkStatus();
  }
  if (name == "final_normalization") {
    absl::StatusOr<ParamValue> v = BoolSpec()->Get(value);
    if (!v.ok()) return InvalidValue(name, value);
    final_normalization_ = v->as_bool();
    return absl::OkStatus();
  }
  if (name == "event_dispatcher") {
    absl::StatusOr<ParamValue> v = EventDispatcherInstanceSpec()->Get(value);
    if (!v.ok()) return InvalidValue(name, value);
    event_dispatcher_ = v->as_string();
    return absl::OkStatus();
  }
  return NoSuchAttribute(class_name(), name);
}

absl::StatusOr<ParamValue> TransformerBuilderBase::GetProperty(const std::string& name) const {
  if (name == "n_layers") return ParamValue(n_layers_);
  if (name == "n_heads") return ParamValue(n_heads_);
  if (name == "feed_forward_dimensions") return ParamValue(feed_forward_dimensions_);
  if (name == "query_dimensions") return ParamValue(query_dimensions_);
  if (name == "value_dimensions") return ParamValue(value_dimensions_);
  if (name == "model_dimensions") return ParamValue(model_dimensions());
  if (name == "dropout") return ParamValue(dropout_);
  if (name == "activation") return ParamValue(activation_);
  if (name == "final_normalization") return ParamValue(final_normalization_);
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return NoSuchAttribute(class_name(), name);
}

// ---------------------------------------------------------------------------
// EncoderBuilderBase

template <typename A>
bool EncoderBuilderBase<A>::HasProperty(const std::string& name) const {
  return name == "attention" || name == "attention_type" ||
         TransformerBuilderBase::HasProperty(name);
}

template <typename A>
absl::Status EncoderBuilderBase<A>::SetProperty(const std::string& name, const ParamValue& value) {
  if (name == "attention_type") {
    if (!value.is_string()) return NotAString(value);
    if (!attention_.ValidateAttentionType(value.as_string())) {
      return absl::InvalidArgumentError(
          absl::StrCat(value.Repr(), " is not an available attention type"));
    }
    attention_type_ = value.as_string();
    return absl::OkStatus();
  }
  return TransformerBuilderBase::SetProperty(name, value);
}

template <typename A>
absl::StatusOr<ParamValue> EncoderBuilderBase<A>::GetProperty(const std::string& name) const {
  if (name == "attention_type") return ParamValue(attention_type_);
  return TransformerBuilderBase::GetProperty(name);
}

template <typename A>
absl::Status EncoderBuilderBase<A>::SetOnAttentionBuilders(const std::string& name,
                                                           const ParamValue& value) {
  return attention_.Set(name, value);
}

template <typename A>
absl::StatusOr<ParamValue> EncoderBuilderBase<A>::GetFromAttentionBuilder(
    const std::string& builder, const std::string& param) const {
  if (builder != "attention") return NoSuchAttribute(class_name(), builder);
  return attention_.Get(param);
}

template class EncoderBuilderBase<AttentionBuilder>;
template class EncoderBuilderBase<RecurrentAttentionBuilder>;

// ---------------------------------------------------------------------------
// DecoderBuilderBase

template <typename S, typename C>
bool DecoderBuilderBase<S, C>::HasProperty(const std::string& name) const {
  static const auto* names = new std::set<std::string>{
      "self_attention",         "cross_attention",       "self_attention_type",
      "cross_attention_type",   "cross_n_heads",         "cross_query_dimensions",
      "cross_value_dimensions", "cross_model_dimensions"};
  return names->count(name) > 0 || TransformerBuilderBase::HasProperty(name);
}

template <typename S, typename C>
absl::Status DecoderBuilderBase<S, C>::SetProperty(const std::string& name,
                                                   const ParamValue& value) {
  if (name == "self_attention_type" || name == "cross_attention_type") {
    const bool self = name == "self_attention_type";
    const bool valid =
        value.is_string() && (self ? self_attention_.ValidateAttentionType(value.as_string())
                                   : cross_attention_.ValidateAttentionType(value.as_string()));
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat(value.Repr(), " is not an available ",
                                                     self ? "self" : "cross", " attention type"));
    }
    (self ? self_attention_type_ : cross_attention_type_) = value.as_string();
    return absl::OkStatus();
  }
  std::optional<int64_t>* cross = nullptr;
  if (name == "cross_n_heads") cross = &cross_n_heads_;
  if (name == "cross_query_dimensions") cross = &cross_query_dimensions_;
  if (name == "cross_value_dimensions") cross = &cross_value_dimensions_;
  if (name == "cross_model_dimensions") cross = &cross_model_dimensions_;
  if (cross != nullptr) {
    absl::StatusOr<std::optional<int64_t>> v = ToOptionalInt(name, value);
    if (!v.ok()) return v.status();
    *cross = *v;
    return absl::OkStatus();
  }
  return TransformerBuilderBase::SetProperty(name, value);
}

template <typename S, typename C>
absl::StatusOr<ParamValue> DecoderBuilderBase<S, C>::GetProperty(const std::string& name) const {
  if (name == "self_attention_type") return ParamValue(self_attention_type_);
  if (name == "cross_attention_type") return ParamValue(cross_attention_type_);
  if (name == "cross_n_heads") return ParamValue(cross_n_heads());
  if (name == "cross_query_dimensions") return ParamValue(cross_query_dimensions());
  if (name == "cross_value_dimensions") return ParamValue(cross_value_dimensions());
  if (name == "cross_model_dimensions") return ParamValue(cross_model_dimensions());
  return TransformerBuilderBase::GetProperty(name);
}

template <typename S, typename C>
absl::Status DecoderBuilderBase<S, C>::SetOnAttentionBuilders(const std::string& name,
                                                              const ParamValue& value) {
  absl::Status status = self_attention_.Set(name, value);
  if (!status.ok()) return status;
  return cross_attention_.Set(name, value);
}

template <typename S, typename C>
absl::StatusOr<ParamValue> DecoderBuilderBase<S, C>::GetFromAttentionBuilder(
    const std::string& builder, const std::string& param) const {
  if (builder == "self_attention") return self_attention_.Get(param);
  if (builder == "cross_attention") return cross_attention_.Get(param);
  return NoSuchAttribute(class_name(), builder);
}

template class DecoderBuilderBase<AttentionBuilder, AttentionBuilder>;
template class DecoderBuilderBase<RecurrentAttentionBuilder, RecurrentCrossAttentionBuilder>;

// ---------------------------------------------------------------------------
// Concrete builders: construction from dictionaries / JSON

#define PERFORMER_DEFINE_BUILDER_FACTORIES(Builder)                                              \
  absl::StatusOr<Builder> Builder::FromDictionary(const ParamItems& items, bool strict) {        \
    return BuilderFromDictionary<Builder>(items, strict);                                        \
  }                                                                                              \
  absl::StatusOr<Builder> Builder::FromJson(const nlohmann::json& kwargs, bool strict) {         \
    return BuilderFromJson<Builder>(kwargs, strict);                                             \
  }                                                                                              \
  absl::StatusOr<Builder> Builder::FromJson(const nlohmann::ordered_json& kwargs, bool strict) { \
    return BuilderFromJson<Builder>(kwargs, strict);                                             \
  }

PERFORMER_DEFINE_BUILDER_FACTORIES(TransformerEncoderBuilder)
PERFORMER_DEFINE_BUILDER_FACTORIES(RecurrentEncoderBuilder)
PERFORMER_DEFINE_BUILDER_FACTORIES(TransformerDecoderBuilder)
PERFORMER_DEFINE_BUILDER_FACTORIES(RecurrentDecoderBuilder)

#undef PERFORMER_DEFINE_BUILDER_FACTORIES

// ---------------------------------------------------------------------------
// Build(): the layers of the reference's get()

namespace {

// Module constructors report bad dimensions through TORCH_CHECK; Build()
// returns them as invalid configurations.
template <typename Fn>
auto CatchTorchErrors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  }
}

torch::nn::LayerNorm FinalNorm(bool final_normalization, int64_t d_model) {
  return final_normalization ? MakeLayerNorm(d_model) : torch::nn::LayerNorm(nullptr);
}

}  // namespace

absl::StatusOr<TransformerEncoderPtr> TransformerEncoderBuilder::Build() {
  if (absl::Status s = attention_.Set("event_dispatcher", event_dispatcher()); !s.ok()) return s;
  return CatchTorchErrors([&]() -> absl::StatusOr<TransformerEncoderPtr> {
    const int64_t d_model = model_dimensions();
    std::vector<TransformerEncoderLayerPtr> layers;
    for (int64_t i = 0; i < n_layers(); ++i) {
      absl::StatusOr<AttentionPtr> inner = attention_.Build(attention_type_);
      if (!inner.ok()) return inner.status();
      auto attention = std::make_shared<AttentionLayerImpl>(*std::move(inner), d_model, n_heads(),
                                                            query_dimensions(), value_dimensions());
      layers.push_back(std::make_shared<TransformerEncoderLayerImpl>(
          std::move(attention), d_model, feed_forward_dimensions(), dropout(), activation()));
    }
    return std::make_shared<TransformerEncoderImpl>(std::move(layers),
                                                    FinalNorm(final_normalization(), d_model));
  });
}

absl::StatusOr<RecurrentTransformerEncoderPtr> RecurrentEncoderBuilder::Build() {
  if (absl::Status s = attention_.Set("event_dispatcher", event_dispatcher()); !s.ok()) return s;
  return CatchTorchErrors([&]() -> absl::StatusOr<RecurrentTransformerEncoderPtr> {
    const int64_t d_model = model_dimensions();
    std::vector<RecurrentTransformerEncoderLayerPtr> layers;
    for (int64_t i = 0; i < n_layers(); ++i) {
      absl::StatusOr<RecurrentAttentionPtr> inner = attention_.Build(attention_type_);
      if (!inner.ok()) return inner.status();
      auto attention = std::make_shared<RecurrentAttentionLayerImpl>(
          *std::move(inner), d_model, n_heads(), query_dimensions(), value_dimensions());
      layers.push_back(std::make_shared<RecurrentTransformerEncoderLayerImpl>(
          std::move(attention), d_model, feed_forward_dimensions(), dropout(), activation()));
    }
    return std::make_shared<RecurrentTransformerEncoderImpl>(
        std::move(layers), FinalNorm(final_normalization(), d_model));
  });
}

absl::StatusOr<TransformerDecoderPtr> TransformerDecoderBuilder::Build() {
  if (absl::Status s = self_attention_.Set("event_dispatcher", event_dispatcher()); !s.ok()) {
    return s;
  }
  if (absl::Status s = cross_attention_.Set("event_dispatcher", event_dispatcher()); !s.ok()) {
    return s;
  }
  return CatchTorchErrors([&]() -> absl::StatusOr<TransformerDecoderPtr> {
    const int64_t d_model = model_dimensions();
    std::vector<TransformerDecoderLayerPtr> layers;
    for (int64_t i = 0; i < n_layers(); ++i) {
      absl::StatusOr<AttentionPtr> self_inner = self_attention_.Build(self_attention_type_);
      if (!self_inner.ok()) return self_inner.status();
      auto self_attention = std::make_shared<AttentionLayerImpl>(
          *std::move(self_inner), d_model, n_heads(), query_dimensions(), value_dimensions());
      absl::StatusOr<AttentionPtr> cross_inner = cross_attention_.Build(cross_attention_type_);
      if (!cross_inner.ok()) return cross_inner.status();
      auto cross_attention = std::make_shared<AttentionLayerImpl>(
          *std::move(cross_inner), d_model, cross_n_heads(), cross_query_dimensions(),
          cross_value_dimensions(), cross_model_dimensions());
      layers.push_back(std::make_shared<TransformerDecoderLayerImpl>(
          std::move(self_attention), std::move(cross_attention), d_model, feed_forward_dimensions(),
          dropout(), activation()));
    }
    return std::make_shared<TransformerDecoderImpl>(std::move(layers),
                                                    FinalNorm(final_normalization(), d_model));
  });
}

absl::StatusOr<RecurrentTransformerDecoderPtr> RecurrentDecoderBuilder::Build() {
  if (absl::Status s = self_attention_.Set("event_dispatcher", event_dispatcher()); !s.ok()) {
    return s;
  }
  if (absl::Status s = cross_attention_.Set("event_dispatcher", event_dispatcher()); !s.ok()) {
    return s;
  }
  return CatchTorchErrors([&]() -> absl::StatusOr<RecurrentTransformerDecoderPtr> {
    const int64_t d_model = model_dimensions();
    std::vector<RecurrentTransformerDecoderLayerPtr> layers;
    for (int64_t i = 0; i < n_layers(); ++i) {
      absl::StatusOr<RecurrentAttentionPtr> self_inner =
          self_attention_.Build(self_attention_type_);
      if (!self_inner.ok()) return self_inner.status();
      auto self_attention = std::make_shared<RecurrentAttentionLayerImpl>(
          *std::move(self_inner), d_model, n_heads(), query_dimensions(), value_dimensions());
      absl::StatusOr<RecurrentCrossAttentionPtr> cross_inner =
          cross_attention_.Build(cross_attention_type_);
      if (!cross_inner.ok()) return cross_inner.status();
      auto cross_attention = std::make_shared<RecurrentCrossAttentionLayerImpl>(
          *std::move(cross_inner), d_model, cross_n_heads(), cross_query_dimensions(),
          cross_value_dimensions(), cross_model_dimensions());
      layers.push_back(std::make_shared<RecurrentTransformerDecoderLayerImpl>(
          std::move(self_attention), std::move(cross_attention), d_model, feed_forward_dimensions(),
          dropout(), activation()));
    }
    return std::make_shared<RecurrentTransformerDecoderImpl>(
        std::move(layers), FinalNorm(final_normalization(), d_model));
  });
}

}  // namespace performer
