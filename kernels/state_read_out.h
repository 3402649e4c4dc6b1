// The read-out of fixed linear-attention states by new queries: cross
// attention's step over a source's summary (state S = sum_j phi(k_j)
// [v_j, 1], kept as the decoder's cross state). For row r and head h, with
// the query's features q (M):
//
//   n = q . S[r, h]      (E + 1),  out[r, h] = n[:E] / n[E]
//
// StateReadOut takes the features, query_features [R, H, M] (a generalized
// kernel's or softmax features, formed row-invariantly by the caller).
// FavorProjectedReadOut forms them in the same launch from head_inputs
// [R, H, D] and projection_t [D, M] = (D^-1/4 P)^T:
//
//   u = x projection_t,  q = exp(u - |x|^2 / (2 sqrt(D)) - max_f u) + kernel_eps
//
// (the softmax kernel's query features without their ratio M^-1/2, which
// cancels in the quotient). state [R, H, M, E + 1] float32 with its last
// three dimensions contiguous (R may be an expanded dimension of stride 0:
// every row reads one summary). Returns [R, H, E] float32. Inference only.
// CUDA only, where StateReadOutSupported: under kernels::
// CudaRowInvariance(), where a row's bits must not depend on the other rows
// (kernels/cuda/state_read_out_cuda.cu: a block per row and head, every sum
// in an order fixed by D, M and E). Elsewhere callers read out with tensor
// ops (a batched product, whose order cuBLAS may pick from the batch).
#pragma once

#include <torch/types.h>

namespace performer::kernels {

bool StateReadOutSupported(const torch::Tensor& state);

torch::Tensor StateReadOut(const torch::Tensor& state, const torch::Tensor& query_features);

torch::Tensor FavorProjectedReadOut(const torch::Tensor& state, const torch::Tensor& head_inputs,
                                    const torch::Tensor& projection_t, double kernel_eps);

}  // namespace performer::kernels
