#include "core/feature_maps/random_fourier_features.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/attention/linear_rows.h"
#include "core/attention/row_invariance.h"

namespace performer {

void FillOrthogonalRandomMatrix(torch::Tensor& w) {
  TORCH_CHECK(w.dim() == 2, "FillOrthogonalRandomMatrix: expected a matrix, got shape ", w.sizes());
  const int64_t rows = w.size(0);
  const int64_t columns = w.size(1);
  TORCH_CHECK(rows > 0 || columns == 0, "FillOrthogonalRandomMatrix: no rows for ", columns,
              " columns");
  torch::NoGradGuard no_grad;
  // The RNG calls (one randn per block, in block order) are those of the
  // reference so that a seeded run reproduces its omega.
  for (int64_t start = 0; start < columns; start += rows) {
    const int64_t end = std::min(start + rows, columns);
    torch::Tensor block =
        torch::randn({rows, rows}, torch::TensorOptions().dtype(torch::kFloat).device(w.device()));
    torch::Tensor norms = torch::sqrt(torch::einsum("ab,ab->a", {block, block}));
    torch::Tensor q = std::get<0>(torch::linalg_qr(block));
    w.slice(/*dim=*/1, start, end)
        .copy_(q.slice(/*dim=*/1, 0, end - start) *
               norms.slice(/*dim=*/0, 0, end - start).unsqueeze(0));
  }
}

RandomFourierFeaturesImpl::RandomFourierFeaturesImpl(int64_t query_dimensions,
                                                     const RandomFourierFeaturesOptions& options)
    : RandomFourierFeaturesImpl(query_dimensions, options.n_dims(), options.softmax_temp(),
                                options.orthogonal(), options.redraw(),
                                options.deterministic_eval()) {}

RandomFourierFeaturesImpl::RandomFourierFeaturesImpl(int64_t query_dimensions,
                                                     std::optional<int64_t> n_dims,
                                                     std::optional<double> softmax_temp,
                                                     bool orthogonal, int64_t redraw,
                                                     bool deterministic_eval)
    : FeatureMapImpl(query_dimensions),
      // Python's `n_dims or query_dimensions`: 0 also means "unset".
      n_dims_(n_dims.value_or(0) != 0 ? *n_dims : query_dimensions),
      softmax_temp_(softmax_temp.has_value()
                        ? *softmax_temp
                        : 1.0 / std::sqrt(static_cast<double>(query_dimensions))),
      orthogonal_(orthogonal),
      redraw_(redraw),
      deterministic_eval_(deterministic_eval) {
  TORCH_CHECK(query_dimensions > 0, class_name(), ": query_dimensions must be positive, got ",
              query_dimensions);
  TORCH_CHECK(n_dims_ >= 0, class_name(), ": n_dims must not be negative, got ", n_dims_);
  TORCH_CHECK(redraw_ >= 1, class_name(), ": redraw must be at least 1, got ", redraw_);
  omega_ = register_buffer("omega", torch::zeros({query_dimensions, n_dims_ / 2}, torch::kFloat));
}

void RandomFourierFeaturesImpl::new_feature_map(torch::Device device) {
  if (frozen()) return;
  if (deterministic_eval_ && !is_training()) return;
  ++calls_;
  if (calls_ % redraw_ != 0) return;

  torch::NoGradGuard no_grad;
  torch::Tensor omega = torch::zeros({query_dims(), n_dims_ / 2},
                                     torch::TensorOptions().dtype(torch::kFloat).device(device));
  if (orthogonal_) {
    FillOrthogonalRandomMatrix(omega);
  } else {
    omega.normal_();
  }
  // set_data keeps the registered buffer the same tensor object (so module
  // handles and state-dict loaders keep seeing it) while allowing a new
  // device, like Module::to does.
  omega_.set_data(omega);
}

torch::Tensor RandomFourierFeaturesImpl::Project(const torch::Tensor& xs) const {
  TORCH_CHECK(xs.device() == omega_.device(), class_name(), ": omega is on ", omega_.device(),
              " but the input is on ", xs.device(), "; call new_feature_map(device) or move the ",
              "module");
  TORCH_CHECK(xs.dim() >= 1 && xs.size(-1) == query_dims(), class_name(),
              ": expected inputs with a last axis of size ", query_dims(), ", got ", xs.sizes());
  const torch::Tensor omega =
      omega_.scalar_type() == xs.scalar_type() ? omega_ : omega_.to(xs.scalar_type());
  const int64_t d = xs.size(-1);
  const int64_t rows = d > 0 ? xs.numel() / d : 0;
  if (!torch::GradMode::is_enabled() && rows > 0 && RowInvariantOn(xs.device()) &&
      xs.scalar_type() == torch::kFloat) {
    // Inference on the CPU, and on CUDA under row invariance
    // (core/attention/row_invariance.h): each row's features from one product
    // in a fixed order (core/attention/linear_rows.h), the same bits whatever
    // the other rows (a prompt's chunking, a step's batch), which sgemm and
    // cuBLAS do not promise.
    std::vector<int64_t> shape = xs.sizes().vec();
    shape.back() = omega.size(1);
    return LinearRows(omega.t().contiguous(), torch::Tensor(), xs.reshape({rows, d}).contiguous())
        .view(shape);
  }
  return torch::matmul(xs, omega);
}

torch::Tensor RandomFourierFeaturesImpl::forward(const torch::Tensor& x) {
  const torch::Tensor u = Project(x * std::sqrt(softmax_temp_));
  const torch::Tensor phi = torch::cat({torch::cos(u), torch::sin(u)}, -1);
  return phi * std::sqrt(2.0 / static_cast<double>(n_dims_));
}

std::optional<ParamValue> RandomFourierFeaturesImpl::attribute(const std::string& name) const {
  if (name == "query_dims" || name == "query_dimensions") return ParamValue(query_dims());
  if (name == "n_dims") return ParamValue(n_dims_);
  if (name == "softmax_temp") return ParamValue(softmax_temp_);
  if (name == "orthogonal") return ParamValue(orthogonal_);
  if (name == "redraw") return ParamValue(redraw_);
  if (name == "deterministic_eval") return ParamValue(deterministic_eval_);
  return std::nullopt;
}

SmoothedRandomFourierFeaturesImpl::SmoothedRandomFourierFeaturesImpl(
    int64_t query_dimensions, const SmoothedRandomFourierFeaturesOptions& options)
    : RandomFourierFeaturesImpl(
          query_dimensions,
          // One feature is kept for the smoothing constant.
          (options.n_dims().has_value() ? *options.n_dims() : query_dimensions) - 1,
          options.softmax_temp(), options.orthogonal(), options.redraw(),
          options.deterministic_eval()),
      smoothing_(options.smoothing()) {}

torch::Tensor SmoothedRandomFourierFeaturesImpl::forward(const torch::Tensor& x) {
  const torch::Tensor y = RandomFourierFeaturesImpl::forward(x);
  std::vector<int64_t> shape = y.sizes().vec();
  shape.back() = 1;
  return torch::cat({y, torch::full(shape, smoothing_, y.options())}, -1);
}

std::optional<ParamValue> SmoothedRandomFourierFeaturesImpl::attribute(
    const std::string& name) const {
  if (name == "smoothing") return ParamValue(smoothing_);
  return RandomFourierFeaturesImpl::attribute(name);
}

}  // namespace performer
