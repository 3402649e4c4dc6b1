#include "core/models/feed_forward.h"

namespace performer::models {

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t mult, bool glu) : glu_(glu) {
  w1_ = register_module("w1", torch::nn::Linear(dim, dim * mult * (glu ? 2 : 1)));
  w2_ = register_module("w2", torch::nn::Linear(dim * mult, dim));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  torch::Tensor h = w1_(x);
  if (glu_) {
    std::vector<torch::Tensor> halves = h.chunk(2, -1);
    h = torch::gelu(halves[0]) * halves[1];
  } else {
    h = torch::gelu(h);
  }
  return w2_(h);
}

}  // namespace performer::models
