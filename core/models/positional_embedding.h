// The absolute positional embedding PerformerLM adds to token embeddings
// (docs/reference/performer-pytorch.md §3 step 2), one of:
//   fixed (rotary on):   buffer "emb" [max_seq_len, dim], the stored sinusoidal table
//   axial:               "weights.0" [1, s0, 1, dim] + "weights.1" [1, 1, s1, dim]
//                        (0.2.x spelling "weights_0"/"weights_1" is renamed by the loader)
//   absolute (learned):  "emb.weight" [max_seq_len, dim]
// Rows(positions) gives the embedding of arbitrary positions, so the full
// forward and the incremental step share one code path.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <vector>

namespace performer::models {

enum class PositionalKind { kFixedSinusoidal, kAxial, kLearned };

class PositionalEmbeddingImpl : public torch::nn::Module {
 public:
  PositionalEmbeddingImpl(PositionalKind kind, int64_t max_seq_len, int64_t dim,
                          std::vector<int64_t> axial_shape = {});

  // positions: int64 tensor of any shape -> [..., dim].
  torch::Tensor Rows(const torch::Tensor& positions) const;
  // Positions 0..n-1 -> [n, dim].
  torch::Tensor First(int64_t n) const;

 private:
  PositionalKind kind_;
  std::vector<int64_t> axial_shape_;
  torch::Tensor table_;            // fixed
  torch::Tensor axial0_, axial1_;  // axial
  torch::nn::Embedding learned_{nullptr};
};
TORCH_MODULE(PositionalEmbedding);

}  // namespace performer::models
