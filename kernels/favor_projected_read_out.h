// The read-out of fixed FAVOR+ states by new queries whose features are
// formed in the same launch: cross attention's step over a source's summary
// (state S = sum_j phi(k_j) [v_j, 1], kept as the decoder's cross state).
// For row r and head h, x = head_inputs[r, h] (D):
//
//   u = x projection_t,  q = exp(u - |x|^2 / (2 sqrt(D)) - max_f u) + kernel_eps
//   n = q . S[r, h]      (E + 1),  out[r, h] = n[:E] / n[E]
//
// (the softmax kernel's query features without their ratio M^-1/2, which
// cancels in the quotient). state [R, H, M, E + 1] float32 with its last
// three dimensions contiguous (R may be an expanded dimension of stride 0:
// every row reads one summary); head_inputs [R, H, D]; projection_t [D, M]
// = (D^-1/4 P)^T. Returns [R, H, E] float32. Inference only.
// CUDA only, where FavorProjectedReadOutSupported: under kernels::
// CudaRowInvariance(), where a row's bits must not depend on the other rows
// (kernels/cuda/favor_projected_read_out_cuda.cu: a block per row and head,
// every sum in an order fixed by D, M and E). Elsewhere callers form the
// features with tensor ops.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

bool FavorProjectedReadOutSupported(const torch::Tensor& state);

torch::Tensor FavorProjectedReadOut(const torch::Tensor& state, const torch::Tensor& head_inputs,
                                    const torch::Tensor& projection_t, double kernel_eps);

}  // namespace performer::kernels
