// CUDA fused decode step of kernels/linear_state_step.h, raw pointers +
// shapes in (contiguous row-major float32 device buffers):
//
//   p = slots ? slots[r] : r                          (row r of the call)
//   S[p] <- decay[r] * S[p] + k[r] (x) [v[r], 1]      S: (pool, M, E + 1), in place
//   acc = q[r] . S[p]                                 (E + 1)
//   without normalisation: out[r] = acc               out: (rows, E + 1)
//   with it: sums[p] += [v[r], 1] (if sums), qs = sum_f q[r, f],
//            n = scale * acc + offset * qs * sums[p],
//            out[r] = n[:E] / (n[E] + eps * qs)       out: (rows, E)
//
// With `projections` set (FavorStateStep) q, k and decay are not read: the
// FAVOR+ features of the new query and key are computed in the same launch
// from projections (B, 2, H, M) and diag (B, 2, H) (row r = b * H + h),
// with the running key maximum key_max[p] advanced in place:
//   q = exp(u_q - diag_q - max_f u_q) + kernel_eps
//   M' = max(key_max[p], max_f u_k); decay = exp(key_max[p] - M');
//   k = exp(u_k - diag_k - M').
// With `head_inputs` set instead (FavorProjectedStateStep) u and diag are
// formed in the launch too, from the rows' query and key vectors
// head_inputs (B, 2, H, D) and projection_t = (d^-1/4 P)^T (D, M):
//   u[f] = sum_i x[i] projection_t[i, f] (i in order), diag = diag_scale |x|^2.
// Each block forms its own row's u (2 M D multiply-adds, P read from L2),
// which replaces a GEMM and the elementwise ops of the diagonal per layer.
//
// LinearStateStepForward (CudaStepKernel::kRowBlocks): one block per row r
// walking the row's M x (E + 1) state as one contiguous array, thread t
// owning column t mod (E + 1); q and k of the row are staged in shared
// memory, each state element is read and written exactly once, and the
// per-column partial sums of q . S are reduced in shared memory. A row whose
// slot is outside [0, pool) touches no state and gets a NaN output row.
// Slots must be distinct (rows run concurrently).
// Returns a CUDA error string or nullptr.
//
// Called by kernels/linear_state_step.cc for CUDA tensors.
#pragma once

#include <cstdint>

#include "kernels/cuda/host_device.h"
#include "kernels/cuda/linear_state_step_plan.h"

namespace performer::kernels::cuda {

struct LinearStateStepArgs {
  float* state;          // (pool, features, columns)
  const int64_t* slots;  // (rows,) or null (= identity; pool >= rows)
  int64_t pool;
  int64_t rows;
  int64_t features;    // M
  int64_t columns;     // E + 1
  const float* q;      // (rows, M); unused with projections
  const float* k;      // (rows, M); unused with projections
  const float* v;      // (rows, E)
  const float* decay;  // (rows,) or null (= 1); unused with projections
  float* out;          // (rows, E + 1), or (rows, E) when normalize
  // Normalisation (LinearStateStepNormalized / FavorStateStep).
  bool normalize;
  float* sums;  // (pool, E + 1) or null
  float scale;
  float offset;
  float eps;
  // FAVOR+ features (FavorStateStep) when projections is not null.
  const float* projections;  // (B, 2, H, M), B * H = rows
  const float* diag;         // (B, 2, H)
  float* key_max;            // (pool,)
  int64_t heads;
  float kernel_eps;
  // FAVOR+ projection in the kernel (FavorProjectedStateStep) when
  // head_inputs is not null; projections and diag are then unused.
  const float* head_inputs;   // (B, 2, H, D), B * H = rows
  const float* projection_t;  // (D, M)
  int64_t head_dim;           // D
  float diag_scale;           // 1 / (2 sqrt(D))
};

// Whether the step computes FAVOR+ features (from projections or from
// head_inputs) rather than reading q, k and decay.
PERFORMER_HOST_DEVICE inline bool FavorFeaturesInStep(const LinearStateStepArgs& a) {
  return a.projections != nullptr || a.head_inputs != nullptr;
}

// Shared memory of one block must hold 2 M + E + 1 floats (and 2 D with
// head_inputs) plus a fixed reduction buffer; larger shapes are refused with
// an error.
constexpr int64_t kMaxStateStepSharedFloats = 11 * 1024;

const char* LinearStateStepForward(const LinearStateStepArgs& args, void* stream);

// A scan of kernels/linear_state_step.h on CUDA: every state (rows = pool,
// no slots) through `tokens` tokens in order, in one launch, one block per
// state. The pointers of `step` cover every token: plain inputs and the
// output [C, T, H, *] (state r = b H + h, H = heads; LinearStateScan's
// state-major layout is H = 1), FAVOR+ inputs [C, T, 2, H, *] (step.heads
// must equal heads). Each token is StepRowBlock, the body of
// LinearStateStepForward, so a scan and T row-block steps give the same
// bits whatever T and the number of states. The block keeps its state in
// shared memory from the first token to the last when M (E + 1) floats and
// the row-block floats fit in the device's opt-in shared memory per block
// (device: the CUDA device of the state), and in global memory otherwise.
struct LinearStateScanArgs {
  LinearStateStepArgs step;
  int64_t tokens;
  int64_t heads;
};

const char* LinearStateScanForward(const LinearStateScanArgs& args, int device, void* stream);

// The same step by the vector kernel (CudaStepKernel::kVectorSplit, layout
// in kernels/cuda/linear_state_step_plan.h): 16-byte state vectors, per-lane
// column sums in registers, and a row split over several blocks for small
// batches. VectorStepPlanFor says whether it takes the shape (M (E + 1) % 4
// == 0, E + 1 small enough) and how many zeroed workspace floats the call
// needs; the caller passes that plan and that workspace (zeros, on the
// state's device), or null when workspace_floats is 0. device: the CUDA
// device the state is on (its SM count sets the split).
VectorStepPlan VectorStepPlanFor(const LinearStateStepArgs& args, int device);
const char* LinearStateStepVectorForward(const LinearStateStepArgs& args,
                                         const VectorStepPlan& plan, float* workspace,
                                         void* stream);

// The same step by the cluster kernel (CudaStepKernel::kClusterSplit):
// row r on the kStepClusterSize blocks of a thread-block cluster, each
// updating 1 / kStepClusterSize of the row's features, their column sums
// added in the first block through distributed shared memory. Needs a
// device of compute capability 9.0 or later (ClusterStepSupported); shared
// memory as LinearStateStepForward.
constexpr int kStepClusterSize = 8;
bool ClusterStepSupported(int device);
const char* LinearStateStepClusterForward(const LinearStateStepArgs& args, void* stream);

}  // namespace performer::kernels::cuda
