// Declarations of the emulated kernels (tests/kernels/cuda/emulation):
// kernels/cuda's headers in namespace performer::kernels::cuda_emulated, the
// name emulate_cuda_source.py gives the kernels' namespace. No header a test
// includes before it may include these kernels/cuda headers (their include
// guards would keep them out of the renamed namespace).
#pragma once

#define cuda cuda_emulated
#include "kernels/cuda/aggregate_cuda.h"
#include "kernels/cuda/causal_linear_prefill_cuda.h"
#include "kernels/cuda/causal_softmax_attention_cuda.h"
#include "kernels/cuda/clustering_cuda.h"
#include "kernels/cuda/favor_features_cuda.h"
#include "kernels/cuda/fused_linear_cuda.h"
#include "kernels/cuda/hashing_cuda.h"
#include "kernels/cuda/linear_attention_cuda.h"
#include "kernels/cuda/linear_state_step_cuda.h"
#include "kernels/cuda/local_product_cuda.h"
#include "kernels/cuda/row_norm_cuda.h"
#include "kernels/cuda/sparse_product_cuda.h"
#include "kernels/cuda/state_read_out_cuda.h"
#include "kernels/cuda/windowed_ring_attention_cuda.h"
#undef cuda
