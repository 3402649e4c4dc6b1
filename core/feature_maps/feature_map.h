// The feature-map interface of linear attention, as fast-transformers'
// FeatureMap: phi maps the last axis of (..., E) inputs to (..., F) so that
// phi(q) . phi(k) approximates (or defines) the attention kernel.
//
// Random feature maps hold their sampled projection as the persistent buffer
// "omega" (loadable from a state dict) and resample it in new_feature_map()
// according to their redraw / deterministic_eval settings; frozen() stops
// all resampling (what serving wants once weights are loaded).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/introspection.h"
#include "core/registry/param_value.h"

namespace performer {

class FeatureMapImpl : public torch::nn::Module, public Introspectable {
 public:
  explicit FeatureMapImpl(int64_t query_dims) : query_dims_(query_dims) {}

  // (Re)samples random parameters on `device`. No-op for deterministic maps
  // and for frozen maps.
  virtual void new_feature_map(torch::Device device) = 0;
  virtual torch::Tensor forward_queries(const torch::Tensor& x) { return forward(x); }
  virtual torch::Tensor forward_keys(const torch::Tensor& x) { return forward(x); }
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;

  // E, the size of the mapped axis.
  int64_t query_dims() const { return query_dims_; }
  // F, the size of the output's last axis.
  virtual int64_t output_dims() const = 0;

  // A frozen map never resamples (new_feature_map is a no-op).
  void set_frozen(bool frozen) { frozen_ = frozen; }
  bool frozen() const { return frozen_; }

 protected:
  bool frozen_ = false;

 private:
  int64_t query_dims_;
};

using FeatureMapPtr = std::shared_ptr<FeatureMapImpl>;

}  // namespace performer
