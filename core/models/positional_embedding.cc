#include "core/models/positional_embedding.h"

namespace performer::models {

PositionalEmbeddingImpl::PositionalEmbeddingImpl(PositionalKind kind, int64_t max_seq_len,
                                                 int64_t dim, std::vector<int64_t> axial_shape)
    : kind_(kind), axial_shape_(std::move(axial_shape)) {
  switch (kind) {
    case PositionalKind::kFixedSinusoidal:
      table_ = register_buffer("emb", torch::zeros({max_seq_len, dim}));
      break;
    case PositionalKind::kAxial: {
      auto weights = register_module("weights", std::make_shared<torch::nn::Module>());
      axial0_ = weights->register_parameter("0", torch::zeros({1, axial_shape_.at(0), 1, dim}));
      axial1_ = weights->register_parameter("1", torch::zeros({1, 1, axial_shape_.at(1), dim}));
      break;
    }
    case PositionalKind::kLearned:
      learned_ = register_module("emb", torch::nn::Embedding(max_seq_len, dim));
      break;
  }
}

torch::Tensor PositionalEmbeddingImpl::Rows(const torch::Tensor& positions) const {
  switch (kind_) {
    case PositionalKind::kFixedSinusoidal:
      return table_.index_select(0, positions.reshape(-1)).view([&] {
        std::vector<int64_t> shape = positions.sizes().vec();
        shape.push_back(table_.size(1));
        return shape;
      }());
    case PositionalKind::kAxial: {
      torch::Tensor row = torch::div(positions, axial_shape_[1], "floor");
      torch::Tensor col = torch::remainder(positions, axial_shape_[1]);
      return axial0_.select(0, 0).select(1, 0).index({row}) +
             axial1_.select(0, 0).select(0, 0).index({col});
    }
    case PositionalKind::kLearned:
      break;
  }
  return learned_->weight.index({positions});
}

torch::Tensor PositionalEmbeddingImpl::First(int64_t n) const {
  // On the weights' device: index_select needs its index there.
  const torch::Device device = kind_ == PositionalKind::kFixedSinusoidal ? table_.device()
                               : kind_ == PositionalKind::kAxial         ? axial0_.device()
                                                                 : learned_->weight.device();
  return Rows(torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(device)));
}

}  // namespace performer::models
