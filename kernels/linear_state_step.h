// Fused decode step of recurrent linear attention over a batch of states,
// the hot loop of incremental decoding:
//
//   S[r] <- decay[r] * S[r] + k[r] (x) [v[r], 1]        S: (R, M, E + 1), in place
//   out[r] = q[r] . S[r]                                out: (R, E + 1)
//
// The trailing column of S carries sum_j k_j, so one pass yields both the
// numerator (out[:, :E]) and the normaliser (out[:, E]). Each state is read
// and written exactly once (as separate tensor ops the update and the
// read-out would stream it three times, and a step at batch 32 is bound by
// that memory traffic). decay is (R,) or undefined (= 1): the softmax-kernel
// decoder rescales its sums when the running key maximum grows.
//
// float32, S contiguous; q, k (R, M), v (R, E). Not differentiable
// (inference only). Single entry point; CPU implementation in
// kernels/cpu/linear_state_step_cpu.cc, CUDA (one launch per call for the
// whole batch) in kernels/cuda/linear_state_step_cuda.cu.
//
// Slots: every op takes an optional `slots` (R,) int64 tensor on the state's
// device. Undefined (the default) means row r steps state[r], so state is
// (R, M, E + 1). Given, row r of q, k, v, decay, projections and the output
// steps state[slots[r]] of a larger pool (P, M, E + 1) in place, and sums and
// key_max are (P, ...) pools indexed the same way; the other P - R states are
// not touched, so a scheduler can step any subset of its pool without a
// gather and a scatter. The slots of one call must be distinct and in
// [0, P): checked on the CPU; on CUDA checking would synchronise with the
// device, so the kernel leaves the state of an out-of-range row untouched and
// writes NaN to its output row, and duplicated slots are undefined behaviour.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor LinearStateStep(torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& decay = {},
                              const torch::Tensor& slots = {});

// The same step followed by the normalisation of causal linear attention,
// so that no per-step elementwise pass is left to the caller:
//   sums[r] += [v[r], 1]                       (sums (R, E + 1) in place; optional)
//   n = scale * out[r] + offset * (sum_f q[r, f]) * sums[r]
//   y[r] = n[:E] / (n[E] + eps * sum_f q[r, f])        -> (R, E)
// The FAVOR+ decoder uses offset = scale * 1e-4 (the kernel epsilon of every
// key feature, kept out of the state) and eps = 1e-6; plain linear attention
// uses scale 1, offset 0 and no sums.
torch::Tensor LinearStateStepNormalized(torch::Tensor& state, const torch::Tensor& q,
                                        const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& decay, torch::Tensor sums,
                                        double scale, double offset, double eps,
                                        const torch::Tensor& slots = {});

// The FAVOR+ (softmax-kernel) decode step of performer-style attention with
// the feature map fused in, for R = B*H states:
//   projections (B, 2, H, M): u = (d^-1/4 x) P^T of the new query (index 0)
//   and key (index 1); diag (B, 2, H): |x|^2 / (2 sqrt(d)).
//   q = exp(u_q - diag_q - max_f u_q) + kernel_eps
//   M' = max(key_max, max_f u_k); decay = exp(key_max - M'); k = exp(u_k - diag_k - M')
//   key_max <- M', then LinearStateStepNormalized(state, q, k, v, decay, sums,
//   ratio^2, ratio^2 kernel_eps, denominator_eps * ratio) with ratio = M^-1/2.
// This is q' = r (e_q + eps), k' = r (e_k + eps) of the reference with the
// key sums kept in the frame of the running maximum (exact rescaling).
torch::Tensor FavorStateStep(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                             const torch::Tensor& projections, const torch::Tensor& diag,
                             const torch::Tensor& v, double kernel_eps, double denominator_eps,
                             const torch::Tensor& slots = {});

// FavorStateStep with the FAVOR+ projection of the new query and key done
// in the step: head_inputs (B, 2, H, D) are each head's query (index 0) and
// key (index 1), projection_t (D, M) is (d^-1/4 P)^T, and
//   u = head_inputs . projection_t,  diag = |head_inputs|^2 / (2 sqrt(D))
// are the projections and diag of FavorStateStep. On CUDA they are formed in
// the state kernel's launch (one launch per layer instead of a GEMM, the
// diagonal's elementwise ops and the step; each block re-reads P from L2).
// On the CPU, the reference: u by a matrix product, then FavorStateStep. The
// sums differ in order from a separate GEMM's: not the same bits.
torch::Tensor FavorProjectedStateStep(torch::Tensor& state, torch::Tensor& key_max,
                                      torch::Tensor& sums, const torch::Tensor& head_inputs,
                                      const torch::Tensor& projection_t, const torch::Tensor& v,
                                      double kernel_eps, double denominator_eps,
                                      const torch::Tensor& slots = {});

// Scans: each state through T tokens in order, every token with exactly the
// operations of one step above (one loop body), so that a prompt fed as a
// scan and the same tokens fed one step at a time give the same bits, and a
// token's result does not depend on how many tokens or states share the
// call. On the CPU the threads split the states, never a state's tokens. On
// CUDA, only under kernels::CudaRowInvariance() (kernels/
// cuda_row_invariance.h), a scan is one launch: a block per state walks
// the tokens in order, each token the body of the step's row-block kernel,
// with the state in shared memory when it fits (LinearStateScanSupported
// says where scans run). A long prompt's scan is slower than the chunkwise
// kernels/causal_linear_prefill.h, which sums in another order.
//
// State-major, unnormalised (fast-transformers' RecurrentLinearAttention):
// state (S, M, E + 1), q, k (S, T, M), v (S, T, E) -> (S, T, E + 1).
torch::Tensor LinearStateScan(torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v);
// Token-major, normalised as LinearStateStepNormalized (no decay): C
// sequences of H heads, state (C*H, M, E + 1), sums (C*H, E + 1) or
// undefined, q, k (C, T, H, M), v (C, T, H, E) -> (C, T, H, E).
torch::Tensor LinearStateScanNormalized(torch::Tensor& state, const torch::Tensor& q,
                                        const torch::Tensor& k, const torch::Tensor& v,
                                        torch::Tensor sums, double scale, double offset,
                                        double eps);
// FavorStateStep over T tokens: state (C*H, M, E + 1), key_max (C*H),
// sums (C*H, E + 1), projections (C, T, 2, H, M), diag (C, T, 2, H),
// v (C, T, H, E) -> (C, T, H, E).
torch::Tensor FavorStateScan(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                             const torch::Tensor& projections, const torch::Tensor& diag,
                             const torch::Tensor& v, double kernel_eps, double denominator_eps);
// FavorProjectedStateStep over T tokens: state (C*H, M, E + 1), key_max
// (C*H), sums (C*H, E + 1), head_inputs (C, T, 2, H, D), projection_t
// (D, M), v (C, T, H, E) -> (C, T, H, E). On CUDA each token's projection
// is formed in the scan's launch as in FavorProjectedStateStep's (the
// steps' bits); on the CPU the reference, as FavorProjectedStateStep's (u by
// one matrix product over all tokens, then FavorStateScan).
torch::Tensor FavorProjectedStateScan(torch::Tensor& state, torch::Tensor& key_max,
                                      torch::Tensor& sums, const torch::Tensor& head_inputs,
                                      const torch::Tensor& projection_t, const torch::Tensor& v,
                                      double kernel_eps, double denominator_eps);
// True when the scans run for this state (or a view of it with its leading
// axes merged): contiguous float32 on the CPU, or on a CUDA device under
// kernels::CudaRowInvariance() when this build compiled kernels/cuda.
bool LinearStateScanSupported(const torch::Tensor& state);

// The CUDA kernel behind LinearStateStep, LinearStateStepNormalized and
// FavorStateStep (the CPU has one); kRowBlocks whatever this says under
// kernels::CudaRowInvariance(). Process-wide; read at every call.
//   kByShape (the default): kVectorSplit from kVectorStepMinRows state rows
//     (batch x heads) on, kRowBlocks below, where each measured as fast or
//     faster (kernels/cuda/linear_state_step_plan.h, docs/gpu.md).
//   kRowBlocks: one block per state row, 4-byte loads.
//   kVectorSplit: 16-byte vectors with the read-out summed per column in
//     registers, and each row split over several blocks when the batch is
//     too small to fill the device (kernels/cuda/linear_state_step_plan.h).
//     Shapes it does not take (M (E + 1) % 4 != 0) run kRowBlocks.
//   kClusterSplit: each row on a thread-block cluster of 8 blocks, each
//     updating an eighth of the row's features, the column sums added
//     through distributed shared memory (compute capability 9.0 and later;
//     kRowBlocks elsewhere). Not yet measured on a GPU: kByShape does not
//     pick it (docs/gpu.md).
enum class CudaStepKernel { kByShape, kRowBlocks, kVectorSplit, kClusterSplit };
void SetCudaStepKernel(CudaStepKernel kernel);
CudaStepKernel GetCudaStepKernel();

// Selects a CUDA step kernel for its lifetime, then restores the one before
// (tests and benchmarks that compare the two).
class ScopedCudaStepKernel {
 public:
  explicit ScopedCudaStepKernel(CudaStepKernel kernel) : previous_(GetCudaStepKernel()) {
    SetCudaStepKernel(kernel);
  }
  ~ScopedCudaStepKernel() { SetCudaStepKernel(previous_); }
  ScopedCudaStepKernel(const ScopedCudaStepKernel&) = delete;
  ScopedCudaStepKernel& operator=(const ScopedCudaStepKernel&) = delete;

 private:
  CudaStepKernel previous_;
};

// True when LinearStateStep has a kernel for this state (device, dtype,
// layout): contiguous float32 (rows, M, E + 1) on the CPU, or on a CUDA
// device when this build compiled kernels/cuda.
bool LinearStateStepSupported(const torch::Tensor& state);

}  // namespace performer::kernels
