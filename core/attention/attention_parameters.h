// The parameter specs of the batch attention registry
// (docs/reference/fast-transformers.md §2.4). A registry keeps one spec per
// parameter name and refuses a second registration with a different spec, so
// every attention type registers its parameters through these functions;
// Optional specs compare by inner spec and default, so fresh objects built here
// compare equal.
//
//   parameter              spec (registry default)
//   softmax_temp           Optional(Float)            None = 1/sqrt(E) at runtime
//   attention_dropout      Optional(Float, 0.1)
//   event_dispatcher       Optional(EventDispatcherInstance, "")
//   query_dimensions       Int                        required
//   feature_map            Optional(Callable)         None = elu feature map
//   topk                   Optional(Int, 32)
//   length_limit           Optional(Int, 512)
//   local_context          Int                        required
//   max_sequence_length    Optional(Int, 1024)
//   aft_parameterization   Optional(Int, 64)
//
// Parameters of the clustered family (clusters, iterations, bits, hash_bias,
// chunk_size, rounds, masked) are declared by their own files.
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/registry/param_spec.h"
#include "core/registry/registry.h"

namespace performer::attention_parameters {

inline ParamSpecPtr SoftmaxTemp() { return OptionalSpec(FloatSpec()); }
inline ParamSpecPtr AttentionDropout() { return OptionalSpec(FloatSpec(), 0.1); }
inline ParamSpecPtr EventDispatcher() { return OptionalSpec(EventDispatcherInstanceSpec(), ""); }
inline ParamSpecPtr QueryDimensions() { return IntSpec(); }
inline ParamSpecPtr FeatureMap() { return OptionalSpec(CallableSpec()); }
inline ParamSpecPtr TopK() { return OptionalSpec(IntSpec(), int64_t{32}); }
inline ParamSpecPtr LengthLimit() { return OptionalSpec(IntSpec(), int64_t{512}); }
inline ParamSpecPtr LocalContext() { return IntSpec(); }
inline ParamSpecPtr MaxSequenceLength() { return OptionalSpec(IntSpec(), int64_t{1024}); }
inline ParamSpecPtr AftParameterization() { return OptionalSpec(IntSpec(), int64_t{64}); }

// Readers of validated values (the registry has applied the specs, so the
// alternatives are known).
inline std::optional<double> OptionalFloat(const ParamMap& params, const std::string& name) {
  const ParamValue& v = params.at(name);
  if (v.is_none()) return std::nullopt;
  return v.as_float();
}
inline double Float(const ParamMap& params, const std::string& name) {
  return params.at(name).as_float();
}
inline int64_t Int(const ParamMap& params, const std::string& name) {
  return params.at(name).as_int();
}
inline const std::string& String(const ParamMap& params, const std::string& name) {
  return params.at(name).as_string();
}

// torch.nn.Dropout's constructor check, as a Status (Python raises ValueError
// when the module is built).
inline absl::Status CheckDropoutProbability(double p) {
  if (p < 0.0 || p > 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dropout probability has to be between 0 and 1, but got ", ParamValue(p).Repr()));
  }
  return absl::OkStatus();
}

// Python's `None` for an unset optional float.
inline ParamValue OptionalFloatValue(const std::optional<double>& v) {
  return v.has_value() ? ParamValue(*v) : ParamValue();
}

// Runs a module constructor, turning a c10::Error raised inside it (a torch
// check, or a feature map refusing its settings) into InvalidArgument.
template <typename Module, typename Make>
absl::StatusOr<std::shared_ptr<Module>> Construct(Make&& make) {
  try {
    return std::shared_ptr<Module>(make());
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  }
}

}  // namespace performer::attention_parameters
