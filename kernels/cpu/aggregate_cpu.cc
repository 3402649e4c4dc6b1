#include "kernels/cpu/aggregate_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cstdint>

namespace performer::kernels::cpu {

torch::Tensor AggregateCpu(const torch::Tensor& x, const torch::Tensor& groups,
                           const torch::Tensor& factors) {
  const int64_t batch_heads = x.size(0) * x.size(1);
  const int64_t length = x.size(2);
  const int64_t dims = x.size(3);
  const int64_t clusters = factors.size(2);
  torch::Tensor y = torch::zeros({x.size(0), x.size(1), clusters, dims}, x.options());
  const int64_t* groups_a = groups.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "AggregateCpu", [&] {
    const scalar_t* xs = x.data_ptr<scalar_t>();
    const scalar_t* fs = factors.data_ptr<scalar_t>();
    scalar_t* ys = y.data_ptr<scalar_t>();
    // Each (n, h) owns its slice of Y, so tasks never write the same memory.
    at::parallel_for(0, batch_heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t nh = begin; nh < end; ++nh) {
        scalar_t* y_nh = ys + nh * clusters * dims;
        for (int64_t l = 0; l < length; ++l) {
          const int64_t g = groups_a[nh * length + l];
          if (g < 0 || g >= clusters) continue;
          const scalar_t* x_row = xs + (nh * length + l) * dims;
          scalar_t* y_row = y_nh + g * dims;
          for (int64_t e = 0; e < dims; ++e) y_row[e] += x_row[e];
        }
        for (int64_t c = 0; c < clusters; ++c) {
          const scalar_t f = fs[nh * clusters + c];
          scalar_t* y_row = y_nh + c * dims;
          for (int64_t e = 0; e < dims; ++e) y_row[e] *= f;
        }
      }
    });
  });
  return y;
}

torch::Tensor BroadcastCpu(const torch::Tensor& y, const torch::Tensor& groups,
                           const torch::Tensor& factors) {
  const int64_t batch_heads = y.size(0) * y.size(1);
  const int64_t clusters = y.size(2);
  const int64_t dims = y.size(3);
  const int64_t length = groups.size(2);
  torch::Tensor x = torch::empty({y.size(0), y.size(1), length, dims}, y.options());
  const int64_t* groups_a = groups.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "BroadcastCpu", [&] {
    const scalar_t* ys = y.data_ptr<scalar_t>();
    const scalar_t* fs = factors.data_ptr<scalar_t>();
    scalar_t* xs = x.data_ptr<scalar_t>();
    at::parallel_for(0, batch_heads * length, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t nh = row / length;
        const int64_t g = groups_a[row];
        scalar_t* x_row = xs + row * dims;
        if (g < 0 || g >= clusters) {
          for (int64_t e = 0; e < dims; ++e) x_row[e] = 0;
          continue;
        }
        const scalar_t f = fs[nh * clusters + g];
        const scalar_t* y_row = ys + (nh * clusters + g) * dims;
        for (int64_t e = 0; e < dims; ++e) x_row[e] = f * y_row[e];
      }
    });
  });
  return x;
}

}  // namespace performer::kernels::cpu
