// Whether the library's inference path computes each row (a token of a
// prompt, a sequence of a batch) with one chain of operations whatever the
// other rows of the call, on `device`, so that a token's logits are the same
// bits however its sequence is fed: always on the CPU; on CUDA under
// kernels::CudaRowInvariance() (kernels/cuda_row_invariance.h: the server's
// --cuda_same_bits), which a program sets before it loads models. Where it
// holds, models feed a prompt through the decode step's operations
// (PerformerLM::Extend), token by token in each attention layer. The
// library's handle on kernels::RowInvariantOn, for the layers that may not
// include kernels/.
#pragma once

#include "kernels/cuda_row_invariance.h"

namespace performer {

using kernels::RowInvariantOn;

}  // namespace performer
