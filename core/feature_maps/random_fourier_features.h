// Random Fourier features for the RBF kernel (Rahimi & Recht), as
// fast-transformers' RandomFourierFeatures and SmoothedRandomFourierFeatures.
//
//   xs  = x * sqrt(t)
//   u   = xs . omega                          omega: (E, floor(n_dims/2))
//   phi = sqrt(2 / n_dims) * [cos u, sin u]   output: 2*floor(n_dims/2)
//
// With omega ~ N(0, I) columns, E[phi(x) . phi(y)] = exp(-t |x - y|^2 / 2)
// for even n_dims (the scale uses n_dims itself, not 2*floor(n_dims/2)).
//
// RandomFourierFeatures(query_dimensions, options) (options are chained
// setters, e.g. RandomFourierFeaturesOptions().n_dims(256)):
//   n_dims              feature-map size; unset or 0 -> query_dimensions
//   softmax_temp        t; unset -> 1/sqrt(query_dimensions) (0 stays 0)
//   orthogonal = false  omega from FillOrthogonalRandomMatrix instead of N(0, 1)
//   redraw = 1          resample on every redraw-th new_feature_map() call
//   deterministic_eval = false   never resample in eval mode
//
// SmoothedRandomFourierFeatures(query_dimensions, options): the RFF above
// built with n' = (n_dims if set, else query_dimensions) - 1 (then `n' or E`
// again; a negative n' is an error),
// with the constant `smoothing` (default 1.0) appended as a last feature, so
// phi(x) . phi(y) approximates exp(-t |x - y|^2 / 2) + smoothing^2. Output
// size 2*floor(n'/2) + 1.
//
// Sampling (new_feature_map(device)), shared by Favor and
// GeneralizedRandomFeatures: a no-op when frozen(); a no-op when
// deterministic_eval and not is_training(); otherwise a call counter that
// starts at -1 is incremented and omega is resampled only when
// counter % redraw == 0 (so the first call always samples). A new omega is a
// float32 (E, floor(n_dims/2)) tensor on `device` holding N(0, 1) draws of the
// global torch generator, or FillOrthogonalRandomMatrix. It replaces the contents
// of the persistent buffer "omega" (the registered buffer stays the same
// tensor object, so a state dict loads into it). Before the first sample
// omega is zeros. The RNG calls are the reference's, in its order: after
// torch::manual_seed(s) the reference's omega for seed s is reproduced
// (Gaussian bit-exactly, orthogonal up to a few ulps from the LAPACK QR).
//
// forward() uses omega in the input's dtype. redraw must be >= 1 (Python
// fails with ZeroDivisionError at the first sample for 0).
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/feature_maps/feature_map.h"

namespace performer {

// Fills the float (rows, columns) tensor `w` in place with orthogonal random
// features: columns in blocks of `rows`; for each block a fresh rows x rows
// G ~ N(0, 1) is drawn from the global generator on w's device, Q is the
// reduced QR factor of G, and block column j is Q[:, j] * ||G[j, :]|| (the
// norm of ROW j of G, chi-distributed with `rows` degrees of freedom).
// Columns inside a block are mutually orthogonal.
void FillOrthogonalRandomMatrix(torch::Tensor& w);

struct RandomFourierFeaturesOptions {
  TORCH_ARG(std::optional<int64_t>, n_dims);
  TORCH_ARG(std::optional<double>, softmax_temp);
  TORCH_ARG(bool, orthogonal) = false;
  TORCH_ARG(int64_t, redraw) = 1;
  TORCH_ARG(bool, deterministic_eval) = false;
};

// The random projection shared by all random feature maps: omega, its
// sampling and the settings of RandomFourierFeatures. Its own forward() is
// the RFF map.
class RandomFourierFeaturesImpl : public FeatureMapImpl {
 public:
  explicit RandomFourierFeaturesImpl(int64_t query_dimensions,
                                     const RandomFourierFeaturesOptions& options = {});

  void new_feature_map(torch::Device device) override;
  torch::Tensor forward(const torch::Tensor& x) override;
  int64_t output_dims() const override { return 2 * (n_dims_ / 2); }

  std::string class_name() const override { return "RandomFourierFeatures"; }
  // "query_dims", "query_dimensions", "n_dims" (the internal size, as the
  // Python attribute: n'-1 for the smoothed map, 2*n_dims for GRF),
  // "softmax_temp", "orthogonal", "redraw", "deterministic_eval".
  std::optional<ParamValue> attribute(const std::string& name) const override;

  // The sampled projection, the buffer "omega".
  const torch::Tensor& omega() const { return omega_; }
  int64_t n_dims() const { return n_dims_; }
  double softmax_temp() const { return softmax_temp_; }
  bool orthogonal() const { return orthogonal_; }
  int64_t redraw() const { return redraw_; }
  bool deterministic_eval() const { return deterministic_eval_; }
  // new_feature_map() calls counted so far minus one (Python's `_calls`).
  int64_t calls() const { return calls_; }

 protected:
  // `n_dims` follows Python's `n_dims or query_dimensions`; `softmax_temp`
  // unset means 1/sqrt(query_dimensions).
  RandomFourierFeaturesImpl(int64_t query_dimensions, std::optional<int64_t> n_dims,
                            std::optional<double> softmax_temp, bool orthogonal, int64_t redraw,
                            bool deterministic_eval);

  // xs . omega, with omega in x's dtype.
  torch::Tensor Project(const torch::Tensor& xs) const;

 private:
  int64_t n_dims_;
  double softmax_temp_;
  bool orthogonal_;
  int64_t redraw_;
  bool deterministic_eval_;
  int64_t calls_ = -1;
  torch::Tensor omega_;
};

TORCH_MODULE(RandomFourierFeatures);

struct SmoothedRandomFourierFeaturesOptions {
  TORCH_ARG(std::optional<int64_t>, n_dims);
  TORCH_ARG(std::optional<double>, softmax_temp);
  TORCH_ARG(bool, orthogonal) = false;
  TORCH_ARG(double, smoothing) = 1.0;
  TORCH_ARG(int64_t, redraw) = 1;
  TORCH_ARG(bool, deterministic_eval) = false;
};

class SmoothedRandomFourierFeaturesImpl : public RandomFourierFeaturesImpl {
 public:
  explicit SmoothedRandomFourierFeaturesImpl(
      int64_t query_dimensions, const SmoothedRandomFourierFeaturesOptions& options = {});

  torch::Tensor forward(const torch::Tensor& x) override;
  int64_t output_dims() const override { return RandomFourierFeaturesImpl::output_dims() + 1; }

  std::string class_name() const override { return "SmoothedRandomFourierFeatures"; }
  // The RandomFourierFeatures attributes and "smoothing".
  std::optional<ParamValue> attribute(const std::string& name) const override;

  double smoothing() const { return smoothing_; }

 private:
  double smoothing_;
};

TORCH_MODULE(SmoothedRandomFourierFeatures);

}  // namespace performer
