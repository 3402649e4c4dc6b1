#include "core/training/train_options.h"

#include <nlohmann/json.hpp>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace performer::training {
namespace {

// Applies `fn(name, field)` to every option that shapes the loss curve.
template <typename Options, typename Fn>
void ForEachCurveOption(Options& o, Fn&& fn) {
  fn("batch_size", o.batch_size);
  fn("seq_len", o.seq_len);
  fn("lr", o.lr);
  fn("min_lr_ratio", o.min_lr_ratio);
  fn("warmup_steps", o.warmup_steps);
  fn("weight_decay", o.weight_decay);
  fn("beta1", o.beta1);
  fn("beta2", o.beta2);
  fn("adam_eps", o.adam_eps);
  fn("clip_norm", o.clip_norm);
  fn("seed", o.seed);
}

template <typename Options, typename Fn>
void ForEachOption(Options& o, Fn&& fn) {
  fn("steps", o.steps);
  ForEachCurveOption(o, fn);
  fn("val_every", o.val_every);
  fn("val_windows", o.val_windows);
  fn("checkpoint_every", o.checkpoint_every);
  fn("checkpoint_dir", o.checkpoint_dir);
}

}  // namespace

absl::Status TrainOptions::Validate() const {
  std::vector<std::string> errors;
  auto positive = [&](const char* name, int64_t v) {
    if (v < 1) errors.push_back(absl::StrCat(name, " must be >= 1, got ", v));
  };
  auto non_negative = [&](const char* name, int64_t v) {
    if (v < 0) errors.push_back(absl::StrCat(name, " must be >= 0, got ", v));
  };
  positive("batch_size", batch_size);
  positive("seq_len", seq_len);
  non_negative("val_every", val_every);
  non_negative("val_windows", val_windows);
  non_negative("checkpoint_every", checkpoint_every);
  if (!(weight_decay >= 0.0)) errors.push_back(absl::StrCat("weight_decay must be >= 0"));
  if (!(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0)) {
    errors.push_back("beta1 and beta2 must be in [0, 1)");
  }
  if (!(adam_eps > 0.0)) errors.push_back("adam_eps must be > 0");
  if (absl::Status s = Schedule().Validate(); !s.ok()) errors.emplace_back(s.message());
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

LrSchedule TrainOptions::Schedule() const {
  LrSchedule s;
  s.peak_lr = lr;
  s.warmup_steps = warmup_steps;
  s.total_steps = steps;
  s.min_lr_ratio = min_lr_ratio;
  return s;
}

nlohmann::json TrainOptions::ToJson() const {
  nlohmann::json json = nlohmann::json::object();
  ForEachOption(*this, [&](const char* name, const auto& value) { json[name] = value; });
  return json;
}

absl::StatusOr<TrainOptions> TrainOptions::FromJson(const nlohmann::json& json) {
  if (!json.is_object()) return absl::InvalidArgumentError("train options: not a JSON object");
  TrainOptions o;
  std::vector<std::string> errors;
  size_t known = 0;
  ForEachOption(o, [&](const char* name, auto& field) {
    auto it = json.find(name);
    if (it == json.end()) return;
    ++known;
    using T = std::decay_t<decltype(field)>;
    const bool ok = std::is_same_v<T, std::string> ? it->is_string()
                    : std::is_floating_point_v<T>  ? it->is_number()
                                                   : it->is_number_integer();
    if (!ok) {
      errors.push_back(absl::StrCat(name, " has the wrong type"));
      return;
    }
    field = it->template get<T>();
  });
  if (known != json.size()) {
    for (const auto& item : json.items()) {
      bool found = false;
      ForEachOption(o, [&](const char* name, const auto&) { found |= item.key() == name; });
      if (!found) errors.push_back(absl::StrCat("unknown option \"", item.key(), "\""));
    }
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("train options: ", absl::StrJoin(errors, "; ")));
  }
  return o;
}

absl::Status CheckResumable(const TrainOptions& stored, const TrainOptions& requested) {
  std::vector<std::string> names;
  nlohmann::json a = stored.ToJson(), b = requested.ToJson();
  ForEachCurveOption(stored, [&](const char* name, const auto&) {
    if (a[name] != b[name]) {
      names.push_back(
          absl::StrCat(name, " (checkpoint ", a[name].dump(), ", now ", b[name].dump(), ")"));
    }
  });
  if (names.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("a resumed run must keep the options that shape its loss curve: ",
                   absl::StrJoin(names, ", ")));
}

}  // namespace performer::training
