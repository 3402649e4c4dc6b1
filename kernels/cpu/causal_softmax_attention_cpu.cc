#include "kernels/cpu/causal_softmax_attention_cpu.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/attention_scores.h"
#include "kernels/cpu/softmax_weighted_sum.h"

namespace performer::kernels::cpu {
namespace {

// A thread copies a (row, head)'s keys and values into contiguous rows when
// it has at least this many of its queries.
constexpr int64_t kCopyFromQueries = 4;

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
  const ScoresFunction scores_of = ScoresFor(e);
  // The triples in (row, head, token) order, so that a thread's consecutive
  // queries read the same keys and values. Where a thread has several
  // queries of one (row, head), it first copies the keys and values they
  // read into contiguous rows: a key's row is strided by H * E in the pool,
  // which spreads a long window over few cache sets. The copy moves values
  // without arithmetic, so no bit depends on whether it was made.
  at::parallel_for(0, rows * heads * tokens, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(max_keys + kScoreLanes));
    std::vector<float> key_rows, value_rows;
    for (int64_t first = begin; first < end;) {
      const int64_t r = first / (tokens * heads), h = (first / tokens) % heads;
      const int64_t stop = std::min(end, (first / tokens + 1) * tokens);
      const int64_t* last_of_row = visible + r * tokens;
      const float* key = k + r * k_row + h * e;
      const float* value = v + r * v_row + h * d;
      int64_t key_stride = k_pos, value_stride = v_pos;
      if (stop - first >= kCopyFromQueries) {
        const int64_t count =
            *std::max_element(last_of_row + first % tokens, last_of_row + (stop - 1) % tokens + 1) +
            1;
        key_rows.resize(static_cast<size_t>(count * e));
        value_rows.resize(static_cast<size_t>(count * d));
        for (int64_t j = 0; j < count; ++j) {
          std::copy_n(key + j * k_pos, e, key_rows.data() + j * e);
          std::copy_n(value + j * v_pos, d, value_rows.data() + j * d);
        }
        key = key_rows.data();
        value = value_rows.data();
        key_stride = e;
        value_stride = d;
      }
      for (int64_t index = first; index < stop; ++index) {
        const int64_t token = index % tokens, query = (r * tokens + token) * heads + h;
        const int64_t count = last_of_row[token] + 1;
        scores_of({q + query * e, key, key_stride, e, count, temp}, scores.data());
        SoftmaxWeightedSum(
            scores.data(), count, d, [&](int64_t j) { return value + j * value_stride; },
            o + query * d);
      }
      first = stop;
    }
  });
  return out;
}

}  // namespace performer::kernels::cpu
