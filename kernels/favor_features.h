// The performer-pytorch feature maps fused with their random projection
// (docs/reference/performer-pytorch.md §5.4, §5.5), for data (..., L, D) and a
// projection P (M, D):
//
//   c = D^-1/4, u = (c x) P^T                          (..., L, M)
//
// SoftmaxKernelFeatures = softmax_kernel(data, P, is_query,
// normalize_data=True, eps):
//   r = M^-1/2, diag = |x|^2 / 2 * c^2                 (per position)
//   query: phi = r (exp(u - diag - max_f u) + eps)     (max per position)
//   key:   phi = r (exp(u - diag - max_{l,f} u) + eps) (max over all L
//          positions and M features of each leading index (b, h): the key
//          stabiliser, so every key of the sequence shares one maximum)
// GeneralizedKernelFeatures = generalized_kernel(data, P, kernel_fn=ReLU,
// kernel_epsilon, normalize_data=True):
//   phi = relu(u) + kernel_eps
//
// The same maps as core/feature_maps/performer_kernels.h (which uses tensor
// ops); this op computes each in one pass over u and, on CUDA, without the
// (..., L, D) scaled copy of the data. Not differentiable (inference only;
// the reference detaches the maxima, this op detaches everything).
//
// data: float32 or float64 on the CPU (float16/bfloat16 are computed in
// float32); float32, float16 or bfloat16 on CUDA (fp32 accumulation; the
// projection is cast to the data's dtype, as the reference's type_as). The
// result has the data's dtype, shape (..., L, M). data needs at least two
// dims; every leading index is one sequence for the key stabiliser. Single
// entry point; CPU in kernels/cpu/favor_features_cpu.cc, CUDA in
// kernels/cuda/favor_features_cuda.cu.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor SoftmaxKernelFeatures(const torch::Tensor& data, const torch::Tensor& projection,
                                    bool is_query, double eps = 1e-4);

torch::Tensor GeneralizedKernelFeatures(const torch::Tensor& data, const torch::Tensor& projection,
                                        double kernel_eps = 1e-3);

}  // namespace performer::kernels
