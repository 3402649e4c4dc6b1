// Weight sharing between twin models, as fast-transformers'
// utils.make_mirror(src, dst): after MakeMirror(src, dst) every parameter of
// `src` and the same-named parameter of `dst` use one storage, so a batch
// model and its recurrent twin (identical state-dict keys, see the builders)
// serve from a single copy of the weights, and updates made in place to one
// are seen by the other.
//
// Differences from the reference, which re-binds the Parameter objects:
//   - each module keeps its own autograd leaf, so gradients are accumulated
//     per module, not shared (LibTorch cannot replace a registered
//     parameter's handle);
//   - a src parameter missing from dst, or of another shape or dtype, is an
//     InvalidArgument error listing every such name, and nothing is shared
//     (the reference fails part way or silently adds the attribute).
// As in the reference, buffers (e.g. feature-map omega) are not shared.
#pragma once

#include <torch/nn/module.h>

#include "absl/status/status.h"

namespace performer {

absl::Status MakeMirror(const torch::nn::Module& src, torch::nn::Module& dst);

}  // namespace performer
