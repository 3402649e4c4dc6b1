// Torch-facing launch of the CUDA chunkwise causal linear-attention prefill
// (kernels/cuda/causal_linear_prefill_cuda.h): phi_q, phi_k (N,H,L,M),
// v (N,H,L,E), initial_state (N,H,M,E) or undefined, on one CUDA device ->
// float32 out (N,H,L,E) and final_state (N,H,M,E). bfloat16 / float16 inputs
// (all three of one dtype) take the tensor-core path; anything else is made
// float32. Called by kernels/causal_linear_prefill.cc for CUDA tensors.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

struct CausalLinearPrefillOutputs {
  torch::Tensor out;
  torch::Tensor final_state;
};

CausalLinearPrefillOutputs CausalLinearPrefillCuda(const torch::Tensor& phi_q,
                                                   const torch::Tensor& phi_k,
                                                   const torch::Tensor& values,
                                                   const torch::Tensor& initial_state);

}  // namespace performer::kernels::cuda
