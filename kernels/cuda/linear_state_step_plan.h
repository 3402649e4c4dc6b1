// Work layout of the vector decode-step kernel (kernels/cuda/
// linear_state_step_cuda.cu, CudaStepKernel::kVectorSplit), in plain C++ so
// that the host computes it, the kernel follows it and a host test
// (tests/kernels/cuda/linear_state_step_plan_test.cc) checks that it covers
// every state element exactly once.
//
// A row's state is M x C floats (C = E + 1), contiguous, viewed as one flat
// array. A block of T threads walks it in periods of 4 T floats, each thread
// loading one 16-byte vector per period at flat offset 4 t (+ 4 T n). T is a
// multiple of C / gcd(C, 4), so a period is a whole number of state rows
// (C divides 4 T): the column of each of a thread's four lanes is the same
// in every period, so its v values and its four read-out partial sums stay
// in registers, and the feature of a lane advances by 4 T / C per period.
// Needs M C % 4 == 0 (then each row's state is 16-byte aligned, as the
// allocation is).
//
// Small batches split each row's periods over several blocks (grid.y), so
// that B = 1 still fills the device; the blocks of a row add their column
// sums into a zeroed workspace and the last one to finish normalises (see
// the kernel).
#pragma once

#include <cstdint>
#include <numeric>

#include "kernels/cuda/host_device.h"

namespace performer::kernels::cuda {

// The widest block the plan picks (1024 only when C / gcd(C, 4) > 512).
constexpr int kVectorStepMaxThreads = 1024;

struct VectorStepPlan {
  bool supported = false;           // false: the row-block kernel runs instead
  int threads = 0;                  // T
  int64_t period = 0;               // 4 T floats, a multiple of C
  int64_t features_per_period = 0;  // 4 T / C
  int64_t periods = 0;              // ceil(M C / period)
  int splits = 1;                   // blocks per row (grid.y)
  int64_t periods_per_split = 0;    // the last split may have fewer
  int64_t workspace_floats = 0;     // rows (C + 1) when splits > 1, else 0
};

// The lane's column and its feature in period n (lane = 4 t + u, u < 4).
PERFORMER_HOST_DEVICE inline int64_t VectorLaneColumn(int64_t lane, int64_t columns) {
  return lane % columns;
}
PERFORMER_HOST_DEVICE inline int64_t VectorLaneFeature(int64_t lane, int64_t period_index,
                                                       const VectorStepPlan& plan,
                                                       int64_t columns) {
  return period_index * plan.features_per_period + lane / columns;
}

// T: among the multiples of C / gcd(C, 4) from 128 to 512 threads (or the
// one multiple when that exceeds 512), the one that wastes the least: lanes
// of the last, partial warp and vectors past the end of the state in the
// last period. sm_count sets the split: rows x splits >= 4 blocks per SM.
inline VectorStepPlan MakeVectorStepPlan(int64_t rows, int64_t features, int64_t columns,
                                         int sm_count) {
  VectorStepPlan plan;
  if (rows < 1 || features < 1 || columns < 1 || (features * columns) % 4 != 0) return plan;
  const int64_t unit = columns / std::gcd(columns, int64_t{4});
  if (unit > kVectorStepMaxThreads) return plan;
  const int64_t elements = features * columns;
  double best = -1.0;
  for (int64_t t = unit; t <= (unit > 512 ? unit : 512); t += unit) {
    if (t < 128 && t + unit <= 512) continue;
    const double warps = static_cast<double>((t + 31) / 32);
    const int64_t periods = (elements + 4 * t - 1) / (4 * t);
    const double lanes = static_cast<double>(t) / (32.0 * warps);
    const double filled = static_cast<double>(elements) / static_cast<double>(periods * 4 * t);
    if (lanes * filled > best + 1e-9) {
      best = lanes * filled;
      plan.threads = static_cast<int>(t);
    }
  }
  plan.period = 4 * static_cast<int64_t>(plan.threads);
  plan.features_per_period = plan.period / columns;
  plan.periods = (elements + plan.period - 1) / plan.period;
  const int64_t target_blocks = 4 * static_cast<int64_t>(sm_count > 0 ? sm_count : 1);
  int64_t splits = rows >= target_blocks ? 1 : (target_blocks + rows - 1) / rows;
  if (splits > plan.periods) splits = plan.periods;
  if (splits > 65535) splits = 65535;  // grid.y limit
  plan.periods_per_split = (plan.periods + splits - 1) / splits;
  // No empty split: recount with the rounded-up share.
  plan.splits =
      static_cast<int>((plan.periods + plan.periods_per_split - 1) / plan.periods_per_split);
  plan.workspace_floats = plan.splits > 1 ? rows * (columns + 1) : 0;
  plan.supported = true;
  return plan;
}

// CudaStepKernel::kByShape: the vector kernel from this many state rows
// (batch x heads) on, the row-block kernel below: the row blocks measured
// faster up to 512 rows, the vector kernel as fast or faster from 2,048 rows
// (alone, and 1.2x in the whole model's step; docs/gpu.md).
constexpr int64_t kVectorStepMinRows = 1024;

// True when kByShape runs the vector kernel for `rows` rows under `plan`.
inline bool VectorStepPreferred(const VectorStepPlan& plan, int64_t rows) {
  return plan.supported && rows >= kVectorStepMinRows;
}

}  // namespace performer::kernels::cuda
