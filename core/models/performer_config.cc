#include "core/models/performer_config.h"

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace performer::models {
namespace {

using nlohmann::json;

// Reads typed keys out of a JSON object and collects every problem, so that
// one error message lists all bad keys at once.
class KeyReader {
 public:
  KeyReader(const json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  const json* Find(const std::string& key) {
    seen_.insert(prefix_ + key);
    auto it = object_.find(prefix_ + key);
    return it == object_.end() ? nullptr : &*it;
  }

  void Int(const std::string& key, int64_t* out, bool required = false) {
    const json* v = Find(key);
    if (v == nullptr) {
      if (required) missing_.push_back(prefix_ + key);
      return;
    }
    if (!v->is_number_integer() && !v->is_boolean()) return BadType(key, "an integer", *v);
    // A bool is an int in Python (True == 1); nlohmann refuses the
    // conversion with an exception.
    *out = v->is_boolean() ? int64_t{v->get<bool>()} : v->get<int64_t>();
  }
  void OptionalInt(const std::string& key, std::optional<int64_t>* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (v->is_null()) {
      out->reset();
      return;
    }
    if (!v->is_number_integer()) return BadType(key, "an integer or null", *v);
    *out = v->get<int64_t>();
  }
  void Bool(const std::string& key, bool* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_boolean()) return BadType(key, "true or false", *v);
    *out = v->get<bool>();
  }
  void Float(const std::string& key, double* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_number()) return BadType(key, "a number", *v);
    *out = v->get<double>();
  }
  void IntOrList(const std::string& key, std::vector<int64_t>* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    out->clear();
    if (v->is_number_integer()) {
      out->push_back(v->get<int64_t>());
      return;
    }
    if (!v->is_array()) return BadType(key, "an integer or a list of integers", *v);
    for (const json& e : *v) {
      if (!e.is_number_integer()) return BadType(key, "an integer or a list of integers", *v);
      out->push_back(e.get<int64_t>());
    }
  }
  void OptionalList(const std::string& key, std::optional<std::vector<int64_t>>* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (v->is_null()) {
      out->reset();
      return;
    }
    if (!v->is_array()) return BadType(key, "a list of integers or null", *v);
    std::vector<int64_t> values;
    for (const json& e : *v) {
      if (!e.is_number_integer()) return BadType(key, "a list of integers or null", *v);
      values.push_back(e.get<int64_t>());
    }
    *out = std::move(values);
  }
  void Kernel(const std::string& key, KernelFunction* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_string()) return BadType(key, "a torch.nn activation class name", *v);
    absl::StatusOr<KernelFunction> fn = ParseKernelFunction(v->get<std::string>());
    if (!fn.ok()) {
      errors_.push_back(absl::StrCat(prefix_, key, ": ", fn.status().message()));
      return;
    }
    *out = *fn;
  }
  // Whether a reader asked for this (full) key.
  bool Seen(const std::string& full_key) const { return seen_.count(full_key) > 0; }

  // Keys of the object that no reader asked for, except `ignore`.
  std::vector<std::string> Unknown(const std::set<std::string>& ignore) const {
    std::vector<std::string> out;
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (seen_.count(it.key()) == 0 && ignore.count(it.key()) == 0) out.push_back(it.key());
    }
    return out;
  }

  std::vector<std::string>& errors() { return errors_; }
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  void BadType(const std::string& key, const char* expected, const json& v) {
    errors_.push_back(absl::StrCat(prefix_, key, " must be ", expected, ", got ", v.dump()));
  }

  const json& object_;
  std::string prefix_;
  std::set<std::string> seen_;
  std::vector<std::string> errors_;
  std::vector<std::string> missing_;
};

void ReadLMKeys(KeyReader& r, PerformerLMConfig* c, bool encdec_member) {
  // Inside PerformerEncDec, dim comes from the wrapper and num_tokens etc. are
  // still required of each side.
  r.Int("num_tokens", &c->num_tokens, /*required=*/true);
  r.Int("max_seq_len", &c->max_seq_len, /*required=*/true);
  if (!encdec_member) r.Int("dim", &c->dim, /*required=*/true);
  r.Int("depth", &c->depth, /*required=*/true);
  r.Int("heads", &c->heads, /*required=*/true);
  r.OptionalInt("dim_head", &c->dim_head);
  r.IntOrList("local_attn_heads", &c->local_attn_heads);
  r.Int("local_window_size", &c->local_window_size);
  r.Bool("causal", &c->causal);
  r.Int("ff_mult", &c->ff_mult);
  r.OptionalInt("nb_features", &c->nb_features);
  r.Int("feature_redraw_interval", &c->feature_redraw_interval);
  r.Bool("reversible", &c->reversible);
  r.Int("ff_chunks", &c->ff_chunks);
  r.Bool("ff_glu", &c->ff_glu);
  r.Float("emb_dropout", &c->emb_dropout);
  r.Float("ff_dropout", &c->ff_dropout);
  r.Float("attn_dropout", &c->attn_dropout);
  r.Bool("generalized_attention", &c->generalized_attention);
  r.Kernel("kernel_fn", &c->kernel_fn);
  r.Bool("use_scalenorm", &c->use_scalenorm);
  r.Bool("use_rezero", &c->use_rezero);
  r.Bool("cross_attend", &c->cross_attend);
  if (!encdec_member) r.Bool("no_projection", &c->no_projection);
  r.Bool("tie_embed", &c->tie_embed);
  r.Bool("rotary_position_emb", &c->rotary_position_emb);
  r.Bool("axial_position_emb", &c->axial_position_emb);
  r.OptionalList("axial_position_shape", &c->axial_position_shape);
  r.Bool("auto_check_redraw", &c->auto_check_redraw);
  r.Bool("qkv_bias", &c->qkv_bias);
  r.Bool("attn_out_bias", &c->attn_out_bias);
  r.Bool("shift_tokens", &c->shift_tokens);
}

absl::Status Finish(KeyReader& r, const std::set<std::string>& ignore, const char* what) {
  std::vector<std::string> problems = r.errors();
  if (!r.missing().empty()) {
    problems.push_back(absl::StrCat("missing required key(s): ", absl::StrJoin(r.missing(), ", ")));
  }
  std::vector<std::string> unknown = r.Unknown(ignore);
  if (!unknown.empty()) {
    problems.push_back(absl::StrCat("unknown key(s): ", absl::StrJoin(unknown, ", ")));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid ", what, " config: ", absl::StrJoin(problems, "; ")));
}

}  // namespace

int64_t DefaultNbFeatures(int64_t dim_head) {
  return static_cast<int64_t>(static_cast<double>(dim_head) *
                              std::log(static_cast<double>(dim_head)));
}

int64_t FastAttentionConfig::resolved_nb_features() const {
  return nb_features.value_or(DefaultNbFeatures(dim_heads));
}

int64_t PerformerLMConfig::resolved_dim_head() const {
  return dim_head.has_value() ? *dim_head : dim / heads;
}

int64_t PerformerLMConfig::resolved_nb_features() const {
  return nb_features.value_or(DefaultNbFeatures(resolved_dim_head()));
}

int64_t PerformerLMConfig::local_heads(int64_t layer) const {
  if (local_attn_heads.empty()) return 0;
  if (local_attn_heads.size() == 1) return local_attn_heads[0];
  return local_attn_heads.at(static_cast<size_t>(layer));
}

std::vector<int64_t> PerformerLMConfig::resolved_axial_shape() const {
  if (axial_position_shape.has_value()) return *axial_position_shape;
  return {(max_seq_len + 63) / 64, 64};
}

int64_t PerformerLMConfig::position_limit() const {
  if (!rotary_position_emb && axial_position_emb) {
    std::vector<int64_t> shape = resolved_axial_shape();
    return std::min(max_seq_len, shape[0] * shape[1]);
  }
  return max_seq_len;
}

absl::Status ValidateConfig(const PerformerLMConfig& c) {
  std::vector<std::string> problems;
  // Bounded first: the checks below and the model's sizes multiply these.
  auto bounded = [&](const char* name, int64_t v, int64_t high) {
    if (v <= 0 || v > high) {
      problems.push_back(absl::StrCat(name, " must be in [1, ", high, "], got ", v));
      return false;
    }
    return true;
  };
  bool sizes_ok = bounded("num_tokens", c.num_tokens, kMaxConfigTokens);
  sizes_ok = bounded("max_seq_len", c.max_seq_len, kMaxConfigSeqLen) && sizes_ok;
  sizes_ok = bounded("dim", c.dim, kMaxConfigDim) && sizes_ok;
  sizes_ok = bounded("depth", c.depth, kMaxConfigDepth) && sizes_ok;
  sizes_ok = bounded("heads", c.heads, kMaxConfigHeads) && sizes_ok;
  sizes_ok = bounded("ff_mult", c.ff_mult, kMaxConfigFfMult) && sizes_ok;
  sizes_ok = bounded("ff_chunks", c.ff_chunks, kMaxConfigChunks) && sizes_ok;
  sizes_ok = bounded("local_window_size", c.local_window_size, kMaxConfigChunks) && sizes_ok;
  if (c.dim_head.has_value())
    sizes_ok = bounded("dim_head", *c.dim_head, kMaxConfigDim) && sizes_ok;
  if (c.nb_features.has_value()) {
    sizes_ok = bounded("nb_features", *c.nb_features, kMaxConfigFeatures) && sizes_ok;
  }
  const std::pair<const char*, double> dropouts[] = {{"emb_dropout", c.emb_dropout},
                                                     {"ff_dropout", c.ff_dropout},
                                                     {"attn_dropout", c.attn_dropout}};
  for (const auto& [name, p] : dropouts) {
    if (!(p >= 0.0 && p <= 1.0)) {
      problems.push_back(absl::StrCat(name, " must be in [0, 1], got ", p));
    }
  }
  if (c.axial_position_shape.has_value()) {
    for (int64_t side : *c.axial_position_shape) {
      sizes_ok = bounded("axial_position_shape entries", side, kMaxConfigSeqLen) && sizes_ok;
    }
  }
  if (!sizes_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid PerformerLM config: ", absl::StrJoin(problems, "; ")));
  }
  if (c.heads > 0 && c.dim % c.heads != 0) {
    problems.push_back(
        absl::StrCat("dim (", c.dim, ") must be divisible by heads (", c.heads, ")"));
  }
  if (!c.dim_head.has_value() && c.rotary_position_emb) {
    problems.push_back(
        "dim_head null needs rotary_position_emb false (the rotary table is built "
        "with size dim_head)");
  }
  if (c.resolved_dim_head() <= 0) {
    problems.push_back(absl::StrCat("dim_head must be positive, got ", c.resolved_dim_head()));
  } else if (c.resolved_nb_features() <= 0 || c.resolved_nb_features() > kMaxConfigFeatures) {
    problems.push_back(absl::StrCat("the resolved nb_features must be in [1, ", kMaxConfigFeatures,
                                    "], got ", c.resolved_nb_features()));
  }
  if (c.local_attn_heads.size() > 1 && static_cast<int64_t>(c.local_attn_heads.size()) != c.depth) {
    problems.push_back(absl::StrCat("local_attn_heads has ", c.local_attn_heads.size(),
                                    " entries but depth is ", c.depth));
  }
  for (int64_t lh : c.local_attn_heads) {
    if (lh < 0 || lh > c.heads) {
      problems.push_back(
          absl::StrCat("local_attn_heads entry ", lh, " is outside [0, heads=", c.heads, "]"));
    }
  }
  if (c.shift_tokens && c.dim > 0 && c.dim < (c.causal ? 2 : 3)) {
    problems.push_back("shift_tokens needs dim >= number of shifts");
  }
  if ((c.rotary_position_emb || !c.local_attn_heads.empty()) && c.resolved_dim_head() % 2 != 0 &&
      c.heads > 0 && c.dim % c.heads == 0) {
    problems.push_back(
        absl::StrCat("rotary embeddings need an even dim_head, got ", c.resolved_dim_head()));
  }
  if (!c.rotary_position_emb && c.axial_position_emb) {
    std::vector<int64_t> shape = c.resolved_axial_shape();
    if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0) {
      problems.push_back("axial_position_shape must be two positive integers");
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid PerformerLM config: ", absl::StrJoin(problems, "; ")));
}

absl::Status ValidateConfig(const FastAttentionConfig& c) {
  if (c.dim_heads <= 0 || c.dim_heads > kMaxConfigDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid FastAttention config: dim_heads must be in [1, ", kMaxConfigDim,
                     "], got ", c.dim_heads));
  }
  if (c.resolved_nb_features() <= 0 || c.resolved_nb_features() > kMaxConfigFeatures) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid FastAttention config: nb_features must be in [1, ",
                     kMaxConfigFeatures, "], got ", c.resolved_nb_features()));
  }
  return absl::OkStatus();
}

namespace {

// Saturating arithmetic over element counts.
uint64_t Mul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? UINT64_MAX : out;
}
uint64_t Add(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? UINT64_MAX : out;
}
uint64_t U(int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }

}  // namespace

uint64_t MinimumParameterElements(const PerformerLMConfig& c) {
  const uint64_t dim = U(c.dim);
  const uint64_t dim_head = U(c.resolved_dim_head());
  const uint64_t inner = Mul(U(c.heads), dim_head);
  uint64_t total = Mul(U(c.num_tokens), dim);  // token embedding
  if (c.rotary_position_emb) {
    // The fixed sinusoidal table and the rotary table.
    total = Add(total, Mul(U(c.max_seq_len), Add(dim, dim_head)));
  } else if (c.axial_position_emb) {
    for (int64_t side : c.resolved_axial_shape()) total = Add(total, Mul(U(side), dim));
  } else {
    total = Add(total, Mul(U(c.max_seq_len), dim));
  }
  // Per layer: q, k, v and out projections, the random features, the
  // feed-forward's two matrices.
  uint64_t layer = Mul(4, Mul(dim, inner));
  layer = Add(layer, Mul(U(c.resolved_nb_features()), dim_head));
  layer = Add(layer, Mul(Mul(dim, dim), Mul(U(c.ff_mult), c.ff_glu ? 3 : 2)));
  return Add(total, Mul(U(c.depth), layer));
}

uint64_t MinimumParameterElements(const PerformerEncDecConfig& c) {
  return Add(MinimumParameterElements(c.enc), MinimumParameterElements(c.dec));
}

uint64_t MinimumParameterElements(const FastAttentionConfig& c) {
  return Mul(U(c.resolved_nb_features()), U(c.dim_heads));
}

absl::StatusOr<PerformerLMConfig> ParsePerformerLMConfig(const nlohmann::json& json) {
  if (!json.is_object()) return absl::InvalidArgumentError("PerformerLM config must be an object");
  PerformerLMConfig c;
  KeyReader r(json, "");
  ReadLMKeys(r, &c, /*encdec_member=*/false);
  if (absl::Status s = Finish(r, {"model_class"}, "PerformerLM"); !s.ok()) return s;
  if (absl::Status s = ValidateConfig(c); !s.ok()) return s;
  return c;
}

absl::StatusOr<PerformerEncDecConfig> ParsePerformerEncDecConfig(const nlohmann::json& json) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError("PerformerEncDec config must be an object");
  }
  PerformerEncDecConfig c;
  std::vector<std::string> problems;
  // The top-level keys.
  KeyReader top(json, "");
  top.Int("dim", &c.dim, /*required=*/true);
  top.Int("ignore_index", &c.ignore_index);
  top.Int("pad_value", &c.pad_value);
  top.Bool("tie_token_embeds", &c.tie_token_embeds);
  top.Bool("no_projection", &c.no_projection);
  KeyReader enc(json, "enc_");
  KeyReader dec(json, "dec_");
  ReadLMKeys(enc, &c.enc, /*encdec_member=*/true);
  ReadLMKeys(dec, &c.dec, /*encdec_member=*/true);
  for (KeyReader* r : {&top, &enc, &dec}) {
    problems.insert(problems.end(), r->errors().begin(), r->errors().end());
    if (!r->missing().empty()) {
      problems.push_back(
          absl::StrCat("missing required key(s): ", absl::StrJoin(r->missing(), ", ")));
    }
  }
  // A key is unknown when none of the three readers asked for it.
  std::vector<std::string> unknown;
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& key = it.key();
    if (key == "model_class") continue;
    if (!top.Seen(key) && !enc.Seen(key) && !dec.Seen(key)) unknown.push_back(key);
  }
  if (!unknown.empty()) {
    problems.push_back(absl::StrCat("unknown key(s): ", absl::StrJoin(unknown, ", ")));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid PerformerEncDec config: ", absl::StrJoin(problems, "; ")));
  }
  c.enc.dim = c.dim;
  c.dec.dim = c.dim;
  c.enc.no_projection = c.no_projection;
  c.dec.no_projection = c.no_projection;
  // The reference forces these for the decoder whatever was passed.
  c.dec.causal = true;
  c.dec.cross_attend = true;
  for (PerformerLMConfig* side : {&c.enc, &c.dec}) {
    if (absl::Status s = ValidateConfig(*side); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(side == &c.enc ? "encoder: " : "decoder: ", s.message()));
    }
  }
  return c;
}

absl::StatusOr<FastAttentionConfig> ParseFastAttentionConfig(const nlohmann::json& json) {
  if (!json.is_object())
    return absl::InvalidArgumentError("FastAttention config must be an object");
  FastAttentionConfig c;
  KeyReader r(json, "");
  r.Int("dim_heads", &c.dim_heads, /*required=*/true);
  r.OptionalInt("nb_features", &c.nb_features);
  r.Int("ortho_scaling", &c.ortho_scaling);
  r.Bool("causal", &c.causal);
  r.Bool("generalized_attention", &c.generalized_attention);
  r.Kernel("kernel_fn", &c.kernel_fn);
  r.Bool("no_projection", &c.no_projection);
  if (absl::Status s = Finish(r, {"model_class"}, "FastAttention"); !s.ok()) return s;
  if (absl::Status s = ValidateConfig(c); !s.ok()) return s;
  return c;
}

}  // namespace performer::models
