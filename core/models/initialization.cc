#include "core/models/initialization.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "core/models/fast_attention.h"

namespace performer::models {

torch::Tensor SinusoidalTable(int64_t positions, int64_t dim) {
  torch::Tensor inv_freq =
      1.0 / torch::pow(10000.0, torch::arange(0, dim, 2).to(torch::kFloat) / dim);
  torch::Tensor angles = torch::outer(torch::arange(positions).to(torch::kFloat), inv_freq);
  return torch::cat({angles.sin(), angles.cos()}, -1);
}

torch::Tensor GaussianOrthogonalRandomMatrix(int64_t rows, int64_t columns, int64_t scaling) {
  TORCH_CHECK(scaling == 0 || scaling == 1, "ortho_scaling must be 0 or 1, got ", scaling);
  std::vector<torch::Tensor> blocks;
  for (int64_t done = 0; done < rows; done += columns) {
    torch::Tensor q = std::get<0>(torch::linalg_qr(torch::randn({columns, columns}))).t();
    blocks.push_back(q.narrow(0, 0, std::min(columns, rows - done)));
  }
  torch::Tensor multiplier = scaling == 0
                                 ? torch::randn({rows, columns}).norm(2, 1)
                                 : torch::full({rows}, std::sqrt(static_cast<double>(columns)));
  return torch::diag(multiplier).matmul(torch::cat(blocks, 0));
}

void RedrawProjectionMatrices(torch::nn::Module& model) {
  // Pre-order, like named_buffers(): the draws follow the buffer order.
  if (auto* self = dynamic_cast<FastAttentionImpl*>(&model)) self->RedrawProjectionMatrix();
  for (const std::shared_ptr<torch::nn::Module>& module : model.modules(/*include_self=*/false)) {
    if (auto* fast = dynamic_cast<FastAttentionImpl*>(module.get())) fast->RedrawProjectionMatrix();
  }
}

void InitializeLikeReference(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (const auto& item : model.named_buffers()) {
    if (absl::EndsWith(item.key(), "pos_emb.emb")) {  // pos_emb.emb and layer_pos_emb.emb
      torch::Tensor table = item.value();
      table.copy_(SinusoidalTable(table.size(0), table.size(1)));
    }
  }
  RedrawProjectionMatrices(model);
  for (const auto& item : model.named_parameters()) {
    if (absl::EndsWith(item.key(), "pos_emb.weights.0") ||
        absl::EndsWith(item.key(), "pos_emb.weights.1")) {
      item.value().normal_(0.0, 1.0);
    }
  }
}

}  // namespace performer::models
