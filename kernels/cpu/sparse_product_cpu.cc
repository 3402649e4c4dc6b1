#include "kernels/cpu/sparse_product_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cstdint>

namespace performer::kernels::cpu {
namespace {

// Shapes shared by the four functions.
struct Extents {
  int64_t batch_heads;  // N * H
  int64_t queries;      // L
  int64_t keys;         // S
  int64_t clusters;     // C
  int64_t k;            // top-k list length
};

Extents ExtentsOf(const torch::Tensor& keys_or_values, const torch::Tensor& topk,
                  const torch::Tensor& groups) {
  return {groups.size(0) * groups.size(1), groups.size(2), keys_or_values.size(2), topk.size(2),
          topk.size(3)};
}

// The top-k list of the cluster of query row `row` (= nh * L + l), or nullptr
// for a query without a valid cluster.
inline const int64_t* TopkOf(const int64_t* topk, const int64_t* groups, const Extents& x,
                             int64_t row) {
  const int64_t g = groups[row];
  if (g < 0 || g >= x.clusters) return nullptr;
  return topk + ((row / x.queries) * x.clusters + g) * x.k;
}

}  // namespace

torch::Tensor ClusteredSparseDotProductCpu(const torch::Tensor& queries, const torch::Tensor& keys,
                                           const torch::Tensor& topk, const torch::Tensor& groups) {
  const Extents x = ExtentsOf(keys, topk, groups);
  const int64_t dims = queries.size(3);
  torch::Tensor out =
      torch::zeros({queries.size(0), queries.size(1), x.queries, x.k}, queries.options());
  const int64_t* topk_a = topk.data_ptr<int64_t>();
  const int64_t* groups_a = groups.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(queries.scalar_type(), "ClusteredSparseDotProductCpu", [&] {
    const scalar_t* q = queries.data_ptr<scalar_t>();
    const scalar_t* k = keys.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, x.batch_heads * x.queries, 4, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t* list = TopkOf(topk_a, groups_a, x, row);
        if (list == nullptr) continue;
        const int64_t nh = row / x.queries;
        const scalar_t* q_row = q + row * dims;
        for (int64_t j = 0; j < x.k; ++j) {
          const scalar_t* k_row = k + (nh * x.keys + list[j]) * dims;
          scalar_t dot = 0;
          for (int64_t e = 0; e < dims; ++e) dot += q_row[e] * k_row[e];
          o[row * x.k + j] = dot;
        }
      }
    });
  });
  return out;
}

std::pair<torch::Tensor, torch::Tensor> ClusteredSparseDotProductBackwardCpu(
    const torch::Tensor& grad_out, const torch::Tensor& queries, const torch::Tensor& keys,
    const torch::Tensor& topk, const torch::Tensor& groups, bool need_queries, bool need_keys) {
  const Extents x = ExtentsOf(keys, topk, groups);
  const int64_t dims = queries.size(3);
  torch::Tensor grad_queries, grad_keys;
  if (need_queries) grad_queries = torch::zeros_like(queries);
  if (need_keys) grad_keys = torch::zeros_like(keys);
  const int64_t* topk_a = topk.data_ptr<int64_t>();
  const int64_t* groups_a = groups.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(queries.scalar_type(), "ClusteredSparseDotProductBackwardCpu", [&] {
    const scalar_t* g = grad_out.data_ptr<scalar_t>();
    const scalar_t* q = queries.data_ptr<scalar_t>();
    const scalar_t* k = keys.data_ptr<scalar_t>();
    if (need_queries) {
      scalar_t* gq = grad_queries.data_ptr<scalar_t>();
      at::parallel_for(0, x.batch_heads * x.queries, 4, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t* list = TopkOf(topk_a, groups_a, x, row);
          if (list == nullptr) continue;
          const int64_t nh = row / x.queries;
          scalar_t* gq_row = gq + row * dims;
          for (int64_t j = 0; j < x.k; ++j) {
            const scalar_t weight = g[row * x.k + j];
            const scalar_t* k_row = k + (nh * x.keys + list[j]) * dims;
            for (int64_t e = 0; e < dims; ++e) gq_row[e] += weight * k_row[e];
          }
        }
      });
    }
    if (need_keys) {
      scalar_t* gk = grad_keys.data_ptr<scalar_t>();
      // Keys are shared by every query of a sequence: one task per (n, h)
      // owns that sequence's key gradients, so scatter-adds never race.
      at::parallel_for(0, x.batch_heads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t nh = begin; nh < end; ++nh) {
          for (int64_t row = nh * x.queries; row < (nh + 1) * x.queries; ++row) {
            const int64_t* list = TopkOf(topk_a, groups_a, x, row);
            if (list == nullptr) continue;
            const scalar_t* q_row = q + row * dims;
            for (int64_t j = 0; j < x.k; ++j) {
              const scalar_t weight = g[row * x.k + j];
              scalar_t* gk_row = gk + (nh * x.keys + list[j]) * dims;
              for (int64_t e = 0; e < dims; ++e) gk_row[e] += weight * q_row[e];
            }
          }
        }
      });
    }
  });
  return {grad_queries, grad_keys};
}

torch::Tensor ClusteredSparseWeightedAverageCpu(const torch::Tensor& weights,
                                                const torch::Tensor& values,
                                                const torch::Tensor& topk,
                                                const torch::Tensor& groups) {
  const Extents x = ExtentsOf(values, topk, groups);
  const int64_t dims = values.size(3);
  torch::Tensor out =
      torch::zeros({values.size(0), values.size(1), x.queries, dims}, values.options());
  const int64_t* topk_a = topk.data_ptr<int64_t>();
  const int64_t* groups_a = groups.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "ClusteredSparseWeightedAverageCpu", [&] {
    const scalar_t* w = weights.data_ptr<scalar_t>();
    const scalar_t* v = values.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, x.batch_heads * x.queries, 4, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t* list = TopkOf(topk_a, groups_a, x, row);
        if (list == nullptr) continue;
        const int64_t nh = row / x.queries;
        scalar_t* o_row = o + row * dims;
        for (int64_t j = 0; j < x.k; ++j) {
          const scalar_t weight = w[row * x.k + j];
          const scalar_t* v_row = v + (nh * x.keys + list[j]) * dims;
          for (int64_t d = 0; d < dims; ++d) o_row[d] += weight * v_row[d];
        }
      }
    });
  });
  return out;
}

std::pair<torch::Tensor, torch::Tensor> ClusteredSparseWeightedAverageBackwardCpu(
    const torch::Tensor& grad_out, const torch::Tensor& weights, const torch::Tensor& values,
    const torch::Tensor& topk, const torch::Tensor& groups, bool need_weights, bool need_values) {
  const Extents x = ExtentsOf(values, topk, groups);
  const int64_t dims = values.size(3);
  torch::Tensor grad_weights, grad_values;
  if (need_weights) grad_weights = torch::zeros_like(weights);
  if (need_values) grad_values = torch::zeros_like(values);
  const int64_t* topk_a = topk.data_ptr<int64_t>();
  const int64_t* groups_a = groups.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(
      values.scalar_type(), "ClusteredSparseWeightedAverageBackwardCpu", [&] {
        const scalar_t* g = grad_out.data_ptr<scalar_t>();
        const scalar_t* w = weights.data_ptr<scalar_t>();
        const scalar_t* v = values.data_ptr<scalar_t>();
        if (need_weights) {
          scalar_t* gw = grad_weights.data_ptr<scalar_t>();
          at::parallel_for(0, x.batch_heads * x.queries, 4, [&](int64_t begin, int64_t end) {
            for (int64_t row = begin; row < end; ++row) {
              const int64_t* list = TopkOf(topk_a, groups_a, x, row);
              if (list == nullptr) continue;
              const int64_t nh = row / x.queries;
              const scalar_t* g_row = g + row * dims;
              for (int64_t j = 0; j < x.k; ++j) {
                const scalar_t* v_row = v + (nh * x.keys + list[j]) * dims;
                scalar_t dot = 0;
                for (int64_t d = 0; d < dims; ++d) dot += g_row[d] * v_row[d];
                gw[row * x.k + j] = dot;
              }
            }
          });
        }
        if (need_values) {
          scalar_t* gv = grad_values.data_ptr<scalar_t>();
          // One task per (n, h): it owns that sequence's value gradients.
          at::parallel_for(0, x.batch_heads, 1, [&](int64_t begin, int64_t end) {
            for (int64_t nh = begin; nh < end; ++nh) {
              for (int64_t row = nh * x.queries; row < (nh + 1) * x.queries; ++row) {
                const int64_t* list = TopkOf(topk_a, groups_a, x, row);
                if (list == nullptr) continue;
                const scalar_t* g_row = g + row * dims;
                for (int64_t j = 0; j < x.k; ++j) {
                  const scalar_t weight = w[row * x.k + j];
                  scalar_t* gv_row = gv + (nh * x.keys + list[j]) * dims;
                  for (int64_t d = 0; d < dims; ++d) gv_row[d] += weight * g_row[d];
                }
              }
            }
          });
        }
      });
  return {grad_weights, grad_values};
}

}  // namespace performer::kernels::cpu
