#include "kernels/cuda/linear_state_step_launch.h"

#include <torch/torch.h>

#include <cmath>

#include "kernels/cuda/linear_state_step_cuda.h"
#include "kernels/cuda/torch_cuda.h"
#include "kernels/cuda_row_invariance.h"
#include "kernels/linear_state_step.h"

namespace performer::kernels::cuda {
namespace {

torch::Tensor F32(const torch::Tensor& t) {
  return t.defined() ? t.to(torch::kFloat).contiguous() : t;
}

template <typename T>
T* PointerOrNull(const torch::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// The fields every step shares; the callers fill in the rest.
LinearStateStepArgs BaseArgs(torch::Tensor& state, const torch::Tensor& v,
                             const torch::Tensor& slots, torch::Tensor& out) {
  TORCH_CHECK(state.is_contiguous() && state.scalar_type() == torch::kFloat,
              "LinearStateStep: CUDA state must be contiguous float32");
  TORCH_CHECK(!slots.defined() || (slots.scalar_type() == torch::kLong && slots.is_contiguous()),
              "LinearStateStep: slots must be contiguous int64");
  LinearStateStepArgs a{};
  a.state = state.data_ptr<float>();
  a.slots = PointerOrNull<int64_t>(slots);
  a.pool = state.size(0);
  a.rows = v.size(0);
  a.features = state.size(1);
  a.columns = state.size(2);
  a.v = v.data_ptr<float>();
  a.out = out.data_ptr<float>();
  return a;
}

// Runs the kernel that GetCudaStepKernel() selects (kRowBlocks under
// CudaRowInvariance(); kByShape: by the number of rows,
// VectorStepPreferred; kClusterSplit where the device has
// clusters, the row blocks elsewhere); the vector kernel's split needs a
// zeroed workspace, allocated here from LibTorch's caching allocator (inside
// a CUDA graph capture too: the zeroing is a graph node).
void Launch(const LinearStateStepArgs& a, const torch::Tensor& state, const char* op) {
  // One block per row whatever the batch under CudaRowInvariance().
  const CudaStepKernel kernel =
      CudaRowInvariance() ? CudaStepKernel::kRowBlocks : GetCudaStepKernel();
  if (kernel == CudaStepKernel::kClusterSplit) {
    if (ClusterStepSupported(state.device().index())) {
      CheckLaunch(LinearStateStepClusterForward(a, CurrentStream(state)), op);
      return;
    }
  } else if (kernel != CudaStepKernel::kRowBlocks) {
    const VectorStepPlan plan = VectorStepPlanFor(a, state.device().index());
    const bool vector =
        kernel == CudaStepKernel::kVectorSplit ? plan.supported : VectorStepPreferred(plan, a.rows);
    if (vector) {
      torch::Tensor workspace;
      if (plan.workspace_floats > 0)
        workspace = torch::zeros({plan.workspace_floats}, state.options());
      CheckLaunch(LinearStateStepVectorForward(a, plan, PointerOrNull<float>(workspace),
                                               CurrentStream(state)),
                  op);
      return;
    }
  }
  CheckLaunch(LinearStateStepForward(a, CurrentStream(state)), op);
}

// Runs a scan (LinearStateScanForward) of `tokens` tokens over every state,
// sequences of `heads` heads.
void LaunchScan(LinearStateStepArgs a, const torch::Tensor& state, int64_t tokens, int64_t heads,
                const char* op) {
  a.rows = state.size(0);
  CheckLaunch(
      LinearStateScanForward({a, tokens, heads}, state.device().index(), CurrentStream(state)), op);
}

// The normalisation fields of LinearStateStepNormalized and its scan.
void Normalize(LinearStateStepArgs& a, torch::Tensor& sums, double scale, double offset,
               double eps) {
  TORCH_CHECK(!sums.defined() || (sums.is_contiguous() && sums.scalar_type() == torch::kFloat),
              "LinearStateStep: sums must be contiguous float32");
  a.normalize = true;
  a.sums = PointerOrNull<float>(sums);
  a.scale = static_cast<float>(scale);
  a.offset = static_cast<float>(offset);
  a.eps = static_cast<float>(eps);
}

}  // namespace

torch::Tensor LinearStateStepCuda(torch::Tensor& state, const torch::Tensor& q,
                                  const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& decay, const torch::Tensor& slots) {
  const torch::Tensor q32 = F32(q), k32 = F32(k), v32 = F32(v), decay32 = F32(decay);
  torch::Tensor out = torch::empty({v.size(0), state.size(2)}, state.options());
  LinearStateStepArgs a = BaseArgs(state, v32, slots, out);
  a.q = q32.data_ptr<float>();
  a.k = k32.data_ptr<float>();
  a.decay = PointerOrNull<float>(decay32);
  Launch(a, state, "LinearStateStep");
  return out;
}

torch::Tensor LinearStateStepNormalizedCuda(torch::Tensor& state, const torch::Tensor& q,
                                            const torch::Tensor& k, const torch::Tensor& v,
                                            const torch::Tensor& decay, torch::Tensor& sums,
                                            double scale, double offset, double eps,
                                            const torch::Tensor& slots) {
  const torch::Tensor q32 = F32(q), k32 = F32(k), v32 = F32(v), decay32 = F32(decay);
  torch::Tensor out = torch::empty({v.size(0), state.size(2) - 1}, state.options());
  LinearStateStepArgs a = BaseArgs(state, v32, slots, out);
  a.q = q32.data_ptr<float>();
  a.k = k32.data_ptr<float>();
  a.decay = PointerOrNull<float>(decay32);
  Normalize(a, sums, scale, offset, eps);
  Launch(a, state, "LinearStateStepNormalized");
  return out;
}

namespace {

// The fields of the FAVOR+ step (normalisation, key maxima, sums) that the
// FAVOR+ steps and scans share.
LinearStateStepArgs FavorArgs(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                              const torch::Tensor& v32, int64_t heads, double kernel_eps,
                              double denominator_eps, const torch::Tensor& slots,
                              torch::Tensor& out) {
  for (const torch::Tensor* t : {&key_max, &sums}) {
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == torch::kFloat,
                "FavorStateStep: key_max and sums must be contiguous float32");
  }
  LinearStateStepArgs a = BaseArgs(state, v32, slots, out);
  const double ratio = 1.0 / std::sqrt(static_cast<double>(state.size(1)));
  a.normalize = true;
  a.sums = sums.data_ptr<float>();
  a.scale = static_cast<float>(ratio * ratio);
  a.offset = static_cast<float>(ratio * ratio * kernel_eps);
  a.eps = static_cast<float>(denominator_eps * ratio);
  a.key_max = key_max.data_ptr<float>();
  a.heads = heads;
  a.kernel_eps = static_cast<float>(kernel_eps);
  return a;
}

// The fields of the FAVOR+ projection in the kernel (the projected step and
// scan): x32 [..., D], p32 (D, M).
void ProjectInKernel(LinearStateStepArgs& a, const torch::Tensor& x32, const torch::Tensor& p32) {
  a.head_inputs = x32.data_ptr<float>();
  a.projection_t = p32.data_ptr<float>();
  a.head_dim = x32.size(-1);
  a.diag_scale = static_cast<float>(0.5 / std::sqrt(static_cast<double>(a.head_dim)));
}

}  // namespace

torch::Tensor FavorStateStepCuda(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                                 const torch::Tensor& projections, const torch::Tensor& diag,
                                 const torch::Tensor& v, double kernel_eps, double denominator_eps,
                                 const torch::Tensor& slots) {
  const torch::Tensor u32 = F32(projections), diag32 = F32(diag), v32 = F32(v);
  torch::Tensor out = torch::empty({v.size(0), state.size(2) - 1}, state.options());
  LinearStateStepArgs a = FavorArgs(state, key_max, sums, v32, projections.size(2), kernel_eps,
                                    denominator_eps, slots, out);
  a.projections = u32.data_ptr<float>();
  a.diag = diag32.data_ptr<float>();
  Launch(a, state, "FavorStateStep");
  return out;
}

torch::Tensor FavorProjectedStateStepCuda(torch::Tensor& state, torch::Tensor& key_max,
                                          torch::Tensor& sums, const torch::Tensor& head_inputs,
                                          const torch::Tensor& projection_t, const torch::Tensor& v,
                                          double kernel_eps, double denominator_eps,
                                          const torch::Tensor& slots) {
  const torch::Tensor x32 = F32(head_inputs), p32 = F32(projection_t), v32 = F32(v);
  torch::Tensor out = torch::empty({v.size(0), state.size(2) - 1}, state.options());
  LinearStateStepArgs a = FavorArgs(state, key_max, sums, v32, head_inputs.size(2), kernel_eps,
                                    denominator_eps, slots, out);
  ProjectInKernel(a, x32, p32);
  Launch(a, state, "FavorProjectedStateStep");
  return out;
}

torch::Tensor LinearStateScanCuda(torch::Tensor& state, const torch::Tensor& q,
                                  const torch::Tensor& k, const torch::Tensor& v) {
  const torch::Tensor q32 = F32(q), k32 = F32(k), v32 = F32(v);
  torch::Tensor out = torch::empty({state.size(0), q.size(1), state.size(2)}, state.options());
  LinearStateStepArgs a = BaseArgs(state, v32, {}, out);
  a.q = q32.data_ptr<float>();
  a.k = k32.data_ptr<float>();
  LaunchScan(a, state, q.size(1), 1, "LinearStateScan");
  return out;
}

torch::Tensor LinearStateScanNormalizedCuda(torch::Tensor& state, const torch::Tensor& q,
                                            const torch::Tensor& k, const torch::Tensor& v,
                                            torch::Tensor& sums, double scale, double offset,
                                            double eps) {
  const torch::Tensor q32 = F32(q), k32 = F32(k), v32 = F32(v);
  torch::Tensor out = torch::empty(v.sizes(), state.options());
  LinearStateStepArgs a = BaseArgs(state, v32, {}, out);
  a.q = q32.data_ptr<float>();
  a.k = k32.data_ptr<float>();
  Normalize(a, sums, scale, offset, eps);
  LaunchScan(a, state, q.size(1), q.size(2), "LinearStateScanNormalized");
  return out;
}

torch::Tensor FavorStateScanCuda(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                                 const torch::Tensor& projections, const torch::Tensor& diag,
                                 const torch::Tensor& v, double kernel_eps,
                                 double denominator_eps) {
  const torch::Tensor u32 = F32(projections), diag32 = F32(diag), v32 = F32(v);
  torch::Tensor out = torch::empty(v.sizes(), state.options());
  const int64_t heads = projections.size(3);
  LinearStateStepArgs a =
      FavorArgs(state, key_max, sums, v32, heads, kernel_eps, denominator_eps, {}, out);
  a.projections = u32.data_ptr<float>();
  a.diag = diag32.data_ptr<float>();
  LaunchScan(a, state, projections.size(1), heads, "FavorStateScan");
  return out;
}

torch::Tensor FavorProjectedStateScanCuda(torch::Tensor& state, torch::Tensor& key_max,
                                          torch::Tensor& sums, const torch::Tensor& head_inputs,
                                          const torch::Tensor& projection_t, const torch::Tensor& v,
                                          double kernel_eps, double denominator_eps) {
  const torch::Tensor x32 = F32(head_inputs), p32 = F32(projection_t), v32 = F32(v);
  torch::Tensor out = torch::empty(v.sizes(), state.options());
  const int64_t heads = head_inputs.size(3);
  LinearStateStepArgs a =
      FavorArgs(state, key_max, sums, v32, heads, kernel_eps, denominator_eps, {}, out);
  ProjectInKernel(a, x32, p32);
  LaunchScan(a, state, head_inputs.size(1), heads, "FavorProjectedStateScan");
  return out;
}

}  // namespace performer::kernels::cuda
