// CUDA FAVOR+ feature maps fused with the random projection
// (kernels/favor_features.h), raw pointers + shapes in. data (groups,
// length, dims) and projection (features, dims), contiguous row-major, both
// of `dtype`; rows = groups * length.
//
//   1. u = c x P^T (c = dims^-1/4) into the float32 workspace u (rows,
//      features), fp32 accumulation; diag[row] = |x|^2 / 2 * c^2 (softmax
//      maps only). A 16 x 16 tiled shared-memory product: block (16, 16),
//      grid (ceil(rows / 16), ceil(features / 16)), one output per thread.
//   2. softmax maps only: the stabiliser of each span of u, a row (query) or
//      a whole sequence of length rows (key): one 256-thread block per span.
//   3. out = ratio (exp(u - diag - stabiliser) + eps), or relu(u) + eps for
//      the generalized map, converted to dtype: a grid-stride elementwise
//      pass. out may alias u when dtype is float32.
//
// Workspaces: u (rows * features floats), diag (rows floats) and stabiliser
// (rows floats for queries, groups for keys); diag and stabiliser may be
// null for the generalized map. Three launches on one stream. Returns a CUDA
// error string or nullptr.
//
// Called by kernels/favor_features.cc for CUDA tensors.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

enum class FavorMapKind : int { kSoftmaxQuery = 0, kSoftmaxKey = 1, kGeneralizedRelu = 2 };
enum class FavorDtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct FavorFeaturesArgs {
  FavorDtype dtype;
  FavorMapKind map;
  const void* data;        // (groups, length, dims) of dtype
  const void* projection;  // (features, dims) of dtype
  float* u;                // (rows, features) workspace
  float* diag;             // (rows,) workspace; softmax maps
  float* stabiliser;       // (rows,) or (groups,) workspace; softmax maps
  void* out;               // (rows, features) of dtype; may alias u for float32
  int64_t groups;
  int64_t length;
  int64_t dims;
  int64_t features;
  float eps;
};

const char* FavorFeaturesForward(const FavorFeaturesArgs& args, void* stream);

}  // namespace performer::kernels::cuda
