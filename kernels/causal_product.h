// Causal dot product, the kernel of causal linear attention:
//
//   out[n,h,l,:] = sum_{j <= l} (q[n,h,l,:] . k[n,h,j,:]) v[n,h,j,:]
//
// Q (N,H,L,E), K (N,H,L,E), V (N,H,L,M) -> (N,H,L,M), float32 or float64
// (CPU; any strides). Computed with a running E x M state, so memory does not
// grow with L x E x M. Differentiable (autograd): the backward pass is
// O(L*E*M) as well (not twice differentiable). This is the single entry
// point; it dispatches on the device of Q and fails with a c10::Error on a
// device without a kernel. CUDA (kernels/cuda) is forward-only, float32.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor CausalDotProduct(const torch::Tensor& queries, const torch::Tensor& keys,
                               const torch::Tensor& values);

}  // namespace performer::kernels
