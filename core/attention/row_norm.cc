#include "core/attention/row_norm.h"

#include <torch/torch.h>

namespace performer {

torch::Tensor LayerNormRows(const torch::nn::LayerNorm& norm, const torch::Tensor& x) {
  const std::vector<int64_t>& shape = norm->options.normalized_shape();
  TORCH_CHECK(shape.size() == 1 && x.dim() >= 1 && x.size(-1) == shape.front(),
              "LayerNormRows: the norm must be over x's last dimension (", x.sizes(), "), got ",
              shape);
  return kernels::LayerNormRows(x, norm->weight, norm->bias, norm->options.eps());
}

}  // namespace performer
