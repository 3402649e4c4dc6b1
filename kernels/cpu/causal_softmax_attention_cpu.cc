#include "kernels/cpu/causal_softmax_attention_cpu.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/softmax_weighted_sum.h"

namespace performer::kernels::cpu {
namespace {

constexpr int64_t kLanes = 8;

// query . key over e dimensions: lane l sums dimensions l, l + 8, ... in
// order, then the lanes meet in a fixed tree, the same for every key (the
// fixed-width lanes let the compiler use vector registers).
float Dot(const float* query, const float* key, int64_t e) {
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= e; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += query[i + l] * key[i + l];
  }
  for (int64_t l = 0; i < e; ++i, ++l) lane[l] += query[i] * key[i];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// scores[j] = (query . key_j) * temp for keys j < count at key + j * stride.
void Scores(const float* query, const float* key, int64_t stride, int64_t e, int64_t count,
            float temp, float* scores) {
  for (int64_t j = 0; j < count; ++j) scores[j] = Dot(query, key + j * stride, e) * temp;
}

}  // namespace

torch::Tensor CausalSoftmaxAttentionForward(const torch::Tensor& queries, const torch::Tensor& keys,
                                            const torch::Tensor& values, const torch::Tensor& last,
                                            float temp) {
  const int64_t rows = queries.size(0), tokens = queries.size(1), heads = queries.size(2);
  const int64_t e = queries.size(3), d = values.size(3);
  torch::Tensor out = torch::empty({rows, tokens, heads, d}, queries.options());
  const float* q = queries.data_ptr<float>();
  const float* k = keys.data_ptr<float>();
  const float* v = values.data_ptr<float>();
  const int64_t* visible = last.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  const int64_t k_row = keys.stride(0), k_pos = keys.stride(1);
  const int64_t v_row = values.stride(0), v_pos = values.stride(1);
  const int64_t max_keys = keys.size(1);
  at::parallel_for(0, rows * tokens * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(max_keys));
    for (int64_t index = begin; index < end; ++index) {
      const int64_t h = index % heads, token = index / heads, r = token / tokens;
      const float* query = q + index * e;
      const float* key = k + r * k_row + h * e;
      const int64_t count = visible[token] + 1;
      Scores(query, key, k_pos, e, count, temp, scores.data());
      const float* value = v + r * v_row + h * d;
      SoftmaxWeightedSum(
          scores.data(), count, d, [&](int64_t j) { return value + j * v_pos; }, o + index * d);
    }
  });
  return out;
}

}  // namespace performer::kernels::cpu
