// Transformer builders, as fast-transformers' TransformerEncoderBuilder,
// TransformerDecoderBuilder, RecurrentEncoderBuilder and
// RecurrentDecoderBuilder: a flat set of named parameters, set one by one
// (Set) or from an ordered dictionary / JSON object, and Build() assembling
// a fresh model from them on every call.
//
// Parameters (Python name, default):
//   n_layers                 4
//   n_heads                  4
//   feed_forward_dimensions  1024                 d_ff of every layer
//   query_dimensions         64                   per-head d_keys
//   value_dimensions         64                   per-head d_values
//   model_dimensions         None (or 0) -> value_dimensions * n_heads
//   dropout                  0.1                  layer dropout
//   activation               "relu"               "relu" or "gelu"
//   final_normalization      true                 stored as Python bool(value)
//   event_dispatcher         ""                   copied into the attention builder(s) by Build()
//   encoders:  attention_type "full"              validated against the attention builder
//              ("'x' is not an available attention type"; decoders say "self
//              attention type" / "cross attention type"; a non-string value is
//              the AttributeError "'int' object has no attribute 'split'")
//   decoders:  self_attention_type "full", cross_attention_type "full",
//              cross_n_heads None -> n_heads (all cross_* also treat 0 as None),
//              cross_query_dimensions None -> query_dimensions,
//              cross_value_dimensions None -> value_dimensions,
//              cross_model_dimensions None -> cross_n_heads * cross_value_dimensions
//              (the width of the memory, d_model_keys of the cross attention)
// Read-only: attention (encoders), self_attention / cross_attention
// (decoders): the attention builders.
//
// Routing of Set(name, value) (the reference's __setattr__):
//   1. a property of this builder: set it with its validation (errors are
//      returned), then also try to set `name` on the attention builder(s),
//      ignoring any failure;
//   2. anything else is set on the attention builder(s) and errors are
//      returned; decoders set the self-attention builder first, then the
//      cross one (stopping at the first error).
// So attention parameters are flat and shared by all layers and, in
// decoders, by self and cross attention; and query_dimensions reaches a
// linear attention only when it was set explicitly.
//
// Values are coerced like Python int()/float()/bool(); the reference stores
// the integer/float properties unvalidated and fails later, this port fails
// at Set() (the same message form as the registry: "Invalid value 'abc' for
// parameter 'n_layers'"). Names starting with "_" are private attributes:
// stored and readable, they configure nothing (as in Python, where they
// bypass the routing).
//
// Error categories (Python exception -> absl code):
//   ValueError      -> InvalidArgument   invalid values, unknown names under strict
//                                        FromDictionary, failures of Build()
//   AttributeError  -> NotFound          unknown attribute on Set / Get
//   TypeError       -> FailedPrecondition  bad composition ("conditional-full" alone)
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/builders/attention_builder.h"
#include "core/registry/param_value.h"
#include "core/transformers/recurrent_transformers.h"
#include "core/transformers/transformers.h"

namespace performer {

// Keyword arguments in order (Python's dictionary order matters for which
// error is reported first).
using ParamItems = std::vector<std::pair<std::string, ParamValue>>;

// JSON object -> ParamItems in the object's order. Scalars convert directly;
// {"factory": <class>, "kwargs": {...}} becomes a feature-map factory. A
// "strict" key is removed and stored in *strict when given (not null).
absl::StatusOr<ParamItems> ParamItemsFromJson(const nlohmann::json& kwargs, bool* strict = nullptr);
absl::StatusOr<ParamItems> ParamItemsFromJson(const nlohmann::ordered_json& kwargs,
                                              bool* strict = nullptr);

class TransformerBuilderBase {
 public:
  virtual ~TransformerBuilderBase() = default;

  // The reference's class name, e.g. "TransformerEncoderBuilder".
  virtual std::string class_name() const = 0;

  // setattr(builder, name, value) with the routing described above.
  absl::Status Set(const std::string& name, const ParamValue& value);
  // getattr(builder, name) for a property, or "<builder>.<parameter>" for a
  // parameter of an attention builder (e.g. "self_attention.softmax_temp").
  // NotFound for unknown names and attention parameters never set.
  absl::StatusOr<ParamValue> Get(const std::string& name) const;
  // True for every property name (settable or read-only).
  virtual bool HasProperty(const std::string& name) const;

  int64_t n_layers() const { return n_layers_; }
  int64_t n_heads() const { return n_heads_; }
  int64_t feed_forward_dimensions() const { return feed_forward_dimensions_; }
  int64_t query_dimensions() const { return query_dimensions_; }
  int64_t value_dimensions() const { return value_dimensions_; }
  int64_t model_dimensions() const { return Or(model_dimensions_, value_dimensions_ * n_heads_); }
  double dropout() const { return dropout_; }
  const std::string& activation() const { return activation_; }
  bool final_normalization() const { return final_normalization_; }
  const std::string& event_dispatcher() const { return event_dispatcher_; }

 protected:
  // Sets a settable property (HasProperty(name) and not read-only).
  virtual absl::Status SetProperty(const std::string& name, const ParamValue& value);
  virtual absl::StatusOr<ParamValue> GetProperty(const std::string& name) const;
  // Properties that hold attention builders.
  virtual bool IsAttentionBuilderProperty(const std::string& name) const = 0;
  // Sets `name` on the attention builder(s) in routing order.
  virtual absl::Status SetOnAttentionBuilders(const std::string& name, const ParamValue& value) = 0;
  // Reads `param` of the attention builder held by property `builder`.
  virtual absl::StatusOr<ParamValue> GetFromAttentionBuilder(const std::string& builder,
                                                             const std::string& param) const = 0;

  // Shared helpers for derived properties.
  static absl::StatusOr<int64_t> ToInt(const std::string& name, const ParamValue& value);
  static absl::StatusOr<std::optional<int64_t>> ToOptionalInt(const std::string& name,
                                                              const ParamValue& value);
  static absl::StatusOr<std::string> ToString(const std::string& name, const ParamValue& value);
  // Python's `value or fallback`: unset and 0 both give the fallback.
  static int64_t Or(const std::optional<int64_t>& value, int64_t fallback) {
    return value.value_or(0) != 0 ? *value : fallback;
  }
  // The message of the AttributeError Python raises when a property setter
  // calls `value.split` on a value that is not a string.
  static absl::Status NotAString(const ParamValue& value);

 private:
  int64_t n_layers_ = 4;
  int64_t n_heads_ = 4;
  int64_t feed_forward_dimensions_ = 1024;
  int64_t query_dimensions_ = 64;
  int64_t value_dimensions_ = 64;
  std::optional<int64_t> model_dimensions_;
  double dropout_ = 0.1;
  std::string activation_ = "relu";
  bool final_normalization_ = true;
  std::string event_dispatcher_;
  std::vector<std::pair<std::string, ParamValue>> private_attributes_;
};

// Encoders: one attention builder and attention_type.
template <typename AttentionBuilderT>
class EncoderBuilderBase : public TransformerBuilderBase {
 public:
  const AttentionBuilderT& attention() const { return attention_; }
  AttentionBuilderT& attention() { return attention_; }
  const std::string& attention_type() const { return attention_type_; }

  bool HasProperty(const std::string& name) const override;

 protected:
  absl::Status SetProperty(const std::string& name, const ParamValue& value) override;
  absl::StatusOr<ParamValue> GetProperty(const std::string& name) const override;
  bool IsAttentionBuilderProperty(const std::string& name) const override {
    return name == "attention";
  }
  absl::Status SetOnAttentionBuilders(const std::string& name, const ParamValue& value) override;
  absl::StatusOr<ParamValue> GetFromAttentionBuilder(const std::string& builder,
                                                     const std::string& param) const override;

  AttentionBuilderT attention_;
  std::string attention_type_ = "full";
};

// Decoders: self and cross attention builders, their types and the cross
// attention's dimensions.
template <typename SelfBuilderT, typename CrossBuilderT>
class DecoderBuilderBase : public TransformerBuilderBase {
 public:
  const SelfBuilderT& self_attention() const { return self_attention_; }
  SelfBuilderT& self_attention() { return self_attention_; }
  const CrossBuilderT& cross_attention() const { return cross_attention_; }
  CrossBuilderT& cross_attention() { return cross_attention_; }
  const std::string& self_attention_type() const { return self_attention_type_; }
  const std::string& cross_attention_type() const { return cross_attention_type_; }
  int64_t cross_n_heads() const { return Or(cross_n_heads_, n_heads()); }
  int64_t cross_query_dimensions() const { return Or(cross_query_dimensions_, query_dimensions()); }
  int64_t cross_value_dimensions() const { return Or(cross_value_dimensions_, value_dimensions()); }
  int64_t cross_model_dimensions() const {
    return Or(cross_model_dimensions_, cross_n_heads() * cross_value_dimensions());
  }

  bool HasProperty(const std::string& name) const override;

 protected:
  absl::Status SetProperty(const std::string& name, const ParamValue& value) override;
  absl::StatusOr<ParamValue> GetProperty(const std::string& name) const override;
  bool IsAttentionBuilderProperty(const std::string& name) const override {
    return name == "self_attention" || name == "cross_attention";
  }
  absl::Status SetOnAttentionBuilders(const std::string& name, const ParamValue& value) override;
  absl::StatusOr<ParamValue> GetFromAttentionBuilder(const std::string& builder,
                                                     const std::string& param) const override;

  SelfBuilderT self_attention_;
  CrossBuilderT cross_attention_;
  std::string self_attention_type_ = "full";
  std::string cross_attention_type_ = "full";
  std::optional<int64_t> cross_n_heads_;
  std::optional<int64_t> cross_query_dimensions_;
  std::optional<int64_t> cross_value_dimensions_;
  std::optional<int64_t> cross_model_dimensions_;
};

// TransformerEncoder of TransformerEncoderLayer(AttentionLayer(attention)).
class TransformerEncoderBuilder : public EncoderBuilderBase<AttentionBuilder> {
 public:
  std::string class_name() const override { return "TransformerEncoderBuilder"; }
  // from_dictionary: Set() each item in order; with `strict` an unknown name
  // is InvalidArgument("The builder has no parameter '<name>'"), without it
  // is skipped; invalid values always fail.
  static absl::StatusOr<TransformerEncoderBuilder> FromDictionary(const ParamItems& items,
                                                                  bool strict = true);
  // from_kwargs: a "strict" key in `kwargs` overrides `strict`.
  static absl::StatusOr<TransformerEncoderBuilder> FromJson(const nlohmann::json& kwargs,
                                                            bool strict = true);
  static absl::StatusOr<TransformerEncoderBuilder> FromJson(const nlohmann::ordered_json& kwargs,
                                                            bool strict = true);
  // A new model with fresh parameters. Copies event_dispatcher into the
  // attention builder first, as the reference does.
  absl::StatusOr<TransformerEncoderPtr> Build();
};

// RecurrentTransformerEncoder of RecurrentTransformerEncoderLayer(
// RecurrentAttentionLayer(recurrent attention)).
class RecurrentEncoderBuilder : public EncoderBuilderBase<RecurrentAttentionBuilder> {
 public:
  std::string class_name() const override { return "RecurrentEncoderBuilder"; }
  static absl::StatusOr<RecurrentEncoderBuilder> FromDictionary(const ParamItems& items,
                                                                bool strict = true);
  static absl::StatusOr<RecurrentEncoderBuilder> FromJson(const nlohmann::json& kwargs,
                                                          bool strict = true);
  static absl::StatusOr<RecurrentEncoderBuilder> FromJson(const nlohmann::ordered_json& kwargs,
                                                          bool strict = true);
  absl::StatusOr<RecurrentTransformerEncoderPtr> Build();
};

// TransformerDecoder of TransformerDecoderLayer(AttentionLayer(self),
// AttentionLayer(cross)).
class TransformerDecoderBuilder : public DecoderBuilderBase<AttentionBuilder, AttentionBuilder> {
 public:
  std::string class_name() const override { return "TransformerDecoderBuilder"; }
  static absl::StatusOr<TransformerDecoderBuilder> FromDictionary(const ParamItems& items,
                                                                  bool strict = true);
  static absl::StatusOr<TransformerDecoderBuilder> FromJson(const nlohmann::json& kwargs,
                                                            bool strict = true);
  static absl::StatusOr<TransformerDecoderBuilder> FromJson(const nlohmann::ordered_json& kwargs,
                                                            bool strict = true);
  absl::StatusOr<TransformerDecoderPtr> Build();
};

// RecurrentTransformerDecoder of RecurrentTransformerDecoderLayer(
// RecurrentAttentionLayer(self), RecurrentCrossAttentionLayer(cross)).
class RecurrentDecoderBuilder
    : public DecoderBuilderBase<RecurrentAttentionBuilder, RecurrentCrossAttentionBuilder> {
 public:
  std::string class_name() const override { return "RecurrentDecoderBuilder"; }
  static absl::StatusOr<RecurrentDecoderBuilder> FromDictionary(const ParamItems& items,
                                                                bool strict = true);
  static absl::StatusOr<RecurrentDecoderBuilder> FromJson(const nlohmann::json& kwargs,
                                                          bool strict = true);
  static absl::StatusOr<RecurrentDecoderBuilder> FromJson(const nlohmann::ordered_json& kwargs,
                                                          bool strict = true);
  absl::StatusOr<RecurrentTransformerDecoderPtr> Build();
};

}  // namespace performer
