#include "core/feature_maps/favor.h"

#include <torch/torch.h>

#include <cmath>

#include "core/attention/row_norm.h"

namespace performer {

FavorImpl::FavorImpl(int64_t query_dimensions, const FavorOptions& options)
    : RandomFourierFeaturesImpl(query_dimensions, options.n_dims(), options.softmax_temp(),
                                options.orthogonal(), options.redraw(),
                                options.deterministic_eval()),
      stabilize_(options.stabilize()) {}

torch::Tensor FavorImpl::forward(const torch::Tensor& x) {
  const torch::Tensor xs = x * std::sqrt(softmax_temp());
  // Each row's sum alone (core/attention/row_norm.h), as Project's product.
  const torch::Tensor norm_x_squared = SquaredNormRows(xs);
  const torch::Tensor u = Project(xs);

  // exp(-|xs|^2/2) / sqrt(n_dims) is applied in log space.
  torch::Tensor offset = norm_x_squared * 0.5 + 0.5 * std::log(static_cast<double>(n_dims()));
  if (stabilize_) {
    TORCH_CHECK(norm_x_squared.dim() >= 3, "Favor(stabilize=true) needs inputs of shape (N, L, H, ",
                "E) (max over axis 1), got ", x.sizes());
    if (norm_x_squared.dim() != 4 || norm_x_squared.size(1) < norm_x_squared.size(2)) {
      TORCH_WARN_ONCE(
          "Favor.stabilize takes the max over axis 1, assumed to be the sequence axis of an (N, "
          "L, H, E) input; got shape ",
          x.sizes(), ", where axis 1 may be the heads");
    }
    // max (not amax) so that gradients flow to one maximum, as in the reference.
    offset = offset + std::get<0>(norm_x_squared.max(1, /*keepdim=*/true));
  }
  return torch::cat({torch::exp(u - offset), torch::exp(-u - offset)}, -1);
}

std::optional<ParamValue> FavorImpl::attribute(const std::string& name) const {
  if (name == "stabilize") return ParamValue(stabilize_);
  return RandomFourierFeaturesImpl::attribute(name);
}

}  // namespace performer
