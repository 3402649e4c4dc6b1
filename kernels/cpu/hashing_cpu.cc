#include "kernels/cpu/hashing_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cstdint>

namespace performer::kernels::cpu {

torch::Tensor ComputeHashesCpu(const torch::Tensor& x, const torch::Tensor& planes) {
  const int64_t rows = x.size(0);
  const int64_t dims = x.size(1);
  const int64_t bits = planes.size(0);
  torch::Tensor hashes = torch::empty({rows}, x.options().dtype(torch::kInt64));
  int64_t* out = hashes.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "ComputeHashesCpu", [&] {
    const scalar_t* xs = x.data_ptr<scalar_t>();
    const scalar_t* ps = planes.data_ptr<scalar_t>();
    // Cheap rows: a grain of 64 keeps thread start-up from dominating.
    at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        const scalar_t* row = xs + m * dims;
        int64_t code = 0;
        for (int64_t b = 0; b < bits; ++b) {
          const scalar_t* plane = ps + b * (dims + 1);
          scalar_t projection = 0;
          for (int64_t e = 0; e < dims; ++e) projection += row[e] * plane[e];
          code |= static_cast<int64_t>(projection > plane[dims]) << b;
        }
        out[m] = code;
      }
    });
  });
  return hashes;
}

}  // namespace performer::kernels::cpu
