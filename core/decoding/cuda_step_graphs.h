// The batched decode step of a PerformerDecoder on a GPU, captured as one
// CUDA graph per batch-size bucket. An eager step of a small batch is bound
// by launching its ~100 small kernels one by one (gpu_decode_bench: 2 ms per
// step of the bench model at B = 1, slower than the CPU); a replay launches
// them all at once.
//
// Each bucket's graph steps rows [0, bucket) of the decoder's state pool,
// reading its tokens from a static device buffer and writing its logits to a
// static device tensor. The decoder keeps live sequences in rows
// [0, active), so a step of every live sequence is a replay of the smallest
// bucket >= active; the rows past `count` are free and stepped as padding
// from position 0 (every op of the step is row-wise, so they cannot reach
// the live rows, and Prefill resets a row before it is used again).
//
// Needs a LibTorch with CUDA; elsewhere Capture returns Unimplemented.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/models/performer_lm.h"
#include "core/recurrent/state_pool.h"

namespace performer::decoding {

class CudaStepGraphs {
 public:
  // The bucket sizes for a pool of `capacity` rows: 1, 2, 4, ... below
  // capacity, then capacity.
  static std::vector<int64_t> Buckets(int64_t capacity);

  // Captures decoder->Step over rows [0, b) of `pool` for every bucket b.
  // Warm-up steps run over those rows first, so every row must be free; all
  // rows are reset (StatePool::ResetRows) before it returns.
  static absl::StatusOr<std::unique_ptr<CudaStepGraphs>> Capture(models::PerformerLM decoder,
                                                                 StatePool& pool);

  ~CudaStepGraphs();
  CudaStepGraphs(const CudaStepGraphs&) = delete;
  CudaStepGraphs& operator=(const CudaStepGraphs&) = delete;

  // Steps rows [0, count) of the pool with `tokens` (int64 [count], on the
  // pool's device); rows [count, bucket) must be free. Returns the logits
  // [count, vocab] on the device, valid until the next Replay.
  torch::Tensor Replay(const torch::Tensor& tokens, int64_t count);

  int64_t max_rows() const;

 private:
  struct Graph;
  CudaStepGraphs() = default;

  std::vector<std::unique_ptr<Graph>> graphs_;  // ascending bucket sizes
  torch::Tensor tokens_;                        // static input, int64 [capacity]
  torch::Tensor positions_;                     // the pool's positions, [capacity]
};

}  // namespace performer::decoding
