// performer-pytorch's feature maps (docs/reference/performer-pytorch.md §5.4,
// §5.5). Unlike the fast-transformers maps they are stateless functions of the
// data and a projection matrix P [m, d] that always comes from the checkpoint.
//
// Softmax kernel (FAVOR+), for x [..., n, d]:
//   c = d^-1/4, r = m^-1/2, u = (c x) P^T, diag = |x|^2 / 2 * c^2
//   query: phi = r (exp(u - diag - max_f u) + 1e-4)          (max per position)
//   key:   phi = r (exp(u - diag - max_{n,f} u) + 1e-4)      (max over the whole
//          sequence of each leading index: the "key stabiliser",
//          docs/reference/performer-pytorch.md §9.1)
// Generalized kernel: phi = kernel_fn((c x) P^T) + 1e-3.
// Both maxima are detached (constants for autograd), as in the reference.
//
// The key stabiliser makes the key features of a whole sequence depend on
// its largest projection; incremental decoding therefore keeps its sums in
// the frame of a running maximum (see SoftmaxKeyExponents).
#pragma once

#include <torch/types.h>

#include "core/feature_maps/kernel_function.h"

namespace performer {

inline constexpr double kSoftmaxKernelEps = 1e-4;
inline constexpr double kGeneralizedKernelEps = 1e-3;

torch::Tensor ApplyKernelFunction(KernelFunction fn, const torch::Tensor& x);

// u = (d^-1/4 x) P^T.
torch::Tensor ProjectFeatures(const torch::Tensor& x, const torch::Tensor& projection);
// |x|^2 / 2 * d^-1/2, with a trailing singleton axis.
torch::Tensor SoftmaxKernelDiag(const torch::Tensor& x);

torch::Tensor SoftmaxKernelQuery(const torch::Tensor& x, const torch::Tensor& projection);
torch::Tensor SoftmaxKernelKey(const torch::Tensor& x, const torch::Tensor& projection);

// The key map before its ratio and 1e-4: exponents = exp(u - diag - M) with
// the key stabiliser M = max_{n,f} u (detached, shape [...], one per leading
// index), so SoftmaxKernelKey = r (exponents + 1e-4). Prefill keeps M and
// these sums as the decode state's frame. With `floor` ([...], e.g. a decode
// state's running maximum) M is max(floor, max_{n,f} u) instead.
struct SoftmaxKeyExponents {
  torch::Tensor exponents;   // [..., n, m]
  torch::Tensor stabiliser;  // [...]
};
SoftmaxKeyExponents ComputeSoftmaxKeyExponents(const torch::Tensor& x,
                                               const torch::Tensor& projection,
                                               const torch::Tensor& floor = {});
torch::Tensor GeneralizedKernel(const torch::Tensor& x, const torch::Tensor& projection,
                                KernelFunction fn);

// The feature map of a performer-pytorch FastAttention: the softmax kernel,
// the generalized kernel with kernel_fn, or no projection (queries: softmax
// over the features; keys: exp when causal, else softmax over the sequence).
enum class FeatureKind { kSoftmax, kGeneralized, kNoProjection };
struct PerformerFeatureMap {
  FeatureKind kind = FeatureKind::kSoftmax;
  KernelFunction kernel_fn = KernelFunction::kReLU;
  bool causal = false;
};

// q' and k' [.., n, m] of x [.., n, d] under `map` with the projection
// P [m, d]: the entry points every FAVOR+ attention uses. Where no gradient
// is recorded for x, the softmax and ReLU generalized kernels run fused with
// the projection (kernels/favor_features.h, one pass over u); otherwise the
// differentiable tensor ops above.
torch::Tensor PerformerQueryFeatures(const PerformerFeatureMap& map, const torch::Tensor& x,
                                     const torch::Tensor& projection);
torch::Tensor PerformerKeyFeatures(const PerformerFeatureMap& map, const torch::Tensor& x,
                                   const torch::Tensor& projection);

}  // namespace performer
