#include "kernels/cpu/favor_features_cpu.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace performer::kernels::cpu {
namespace {

// |x|^2 / 2 * c^2 of one row, accumulated in double.
template <typename T>
T Diag(const T* x, int64_t dims, double c) {
  double sum = 0.0;
  for (int64_t d = 0; d < dims; ++d) sum += static_cast<double>(x[d]) * static_cast<double>(x[d]);
  return static_cast<T>(sum / 2.0 * (c * c));
}

// phi = ratio * (exp(u - diag - stabiliser) + eps) over one row, in place.
template <typename T>
void SoftmaxRow(T* u, int64_t features, T diag, T stabiliser, T ratio, T eps) {
  for (int64_t f = 0; f < features; ++f) u[f] = ratio * (std::exp(u[f] - diag - stabiliser) + eps);
}

template <typename T>
void Features(const T* x, T* u, int64_t groups, int64_t length, int64_t dims, int64_t features,
              FavorMap map, double eps, double c) {
  const T ratio = static_cast<T>(1.0 / std::sqrt(static_cast<double>(features)));
  const T e = static_cast<T>(eps);
  const int64_t rows = groups * length;
  // About 16K elements of u per task.
  const int64_t row_grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, features));
  switch (map) {
    case FavorMap::kGeneralizedRelu:
      at::parallel_for(0, rows, row_grain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin * features; i < end * features; ++i) {
          u[i] = std::max<T>(u[i], T(0)) + e;
        }
      });
      return;
    case FavorMap::kSoftmaxQuery:
      at::parallel_for(0, rows, row_grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          T* row = u + r * features;
          const T stabiliser = *std::max_element(row, row + features);
          SoftmaxRow(row, features, Diag(x + r * dims, dims, c), stabiliser, ratio, e);
        }
      });
      return;
    case FavorMap::kSoftmaxKey: {
      const int64_t group_grain = std::max<int64_t>(1, row_grain / std::max<int64_t>(1, length));
      at::parallel_for(0, groups, group_grain, [&](int64_t begin, int64_t end) {
        for (int64_t g = begin; g < end; ++g) {
          T* span = u + g * length * features;
          if (length * features == 0) continue;
          const T stabiliser = *std::max_element(span, span + length * features);
          for (int64_t l = 0; l < length; ++l) {
            const int64_t r = g * length + l;
            SoftmaxRow(span + l * features, features, Diag(x + r * dims, dims, c), stabiliser,
                       ratio, e);
          }
        }
      });
      return;
    }
  }
}

}  // namespace

torch::Tensor FavorFeaturesForward(const torch::Tensor& data, const torch::Tensor& projection,
                                   FavorMap map, double eps) {
  const int64_t groups = data.size(0), length = data.size(1), dims = data.size(2);
  const int64_t features = projection.size(0);
  const double c = std::pow(static_cast<double>(dims), -0.25);
  // The same expression as core's ProjectFeatures, so u matches it exactly.
  torch::Tensor u = torch::matmul(data * c, projection.t()).contiguous();
  AT_DISPATCH_FLOATING_TYPES(data.scalar_type(), "FavorFeatures", [&] {
    Features<scalar_t>(data.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(), groups, length, dims,
                       features, map, eps, c);
  });
  return u;
}

}  // namespace performer::kernels::cpu
