// FAVOR+ positive random features for the softmax kernel (Performers,
// Lemma 1), as fast-transformers' Favor:
//
//   xs  = x * sqrt(t)
//   u   = xs . omega                                  omega: (E, floor(n_dims/2))
//   off = |xs|^2 / 2 + ln(n_dims) / 2                 (n_dims as configured)
//   off += max over axis 1 of |xs|^2                  only if stabilize
//   phi = [exp(u - off), exp(-u - off)]               output: 2*floor(n_dims/2)
//
// With omega ~ N(0, I) columns, E[phi(q) . phi(k)] = exp(t q . k) for even
// n_dims. Axis 1 is the sequence axis for (N, L, H, E) inputs; for recurrent
// (N, H, E) inputs it is the heads axis (the reference only warns, so do we,
// once). Inputs with fewer than 2 axes are rejected with stabilize, as in the
// reference.
//
// Favor(query_dimensions, options):
//   n_dims              unset or 0 -> query_dimensions
//   softmax_temp        unset -> 1/sqrt(query_dimensions)
//   orthogonal = true   omega from FillOrthogonalRandomMatrix
//   stabilize = false   add the per-sequence max of |xs|^2 to the offset
//   redraw = 1, deterministic_eval = false   (see random_fourier_features.h)
//
// Omega, its sampling and freezing are those of RandomFourierFeatures.
#pragma once

#include <torch/arg.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/feature_maps/random_fourier_features.h"

namespace performer {

struct FavorOptions {
  TORCH_ARG(std::optional<int64_t>, n_dims);
  TORCH_ARG(std::optional<double>, softmax_temp);
  TORCH_ARG(bool, orthogonal) = true;
  TORCH_ARG(bool, stabilize) = false;
  TORCH_ARG(int64_t, redraw) = 1;
  TORCH_ARG(bool, deterministic_eval) = false;
};

class FavorImpl : public RandomFourierFeaturesImpl {
 public:
  explicit FavorImpl(int64_t query_dimensions, const FavorOptions& options = {});

  torch::Tensor forward(const torch::Tensor& x) override;

  std::string class_name() const override { return "Favor"; }
  // The RandomFourierFeatures attributes and "stabilize".
  std::optional<ParamValue> attribute(const std::string& name) const override;

  bool stabilize() const { return stabilize_; }

 private:
  bool stabilize_;
};

TORCH_MODULE(Favor);

}  // namespace performer
