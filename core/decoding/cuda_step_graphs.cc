#include "core/decoding/cuda_step_graphs.h"

#include <torch/torch.h>

#include <exception>
#include <string>

#include "absl/strings/str_cat.h"

#if PERFORMER_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace performer::decoding {

#if PERFORMER_TORCH_CUDA
struct CudaStepGraphs::Graph {
  int64_t rows = 0;
  at::cuda::CUDAGraph graph;
  torch::Tensor logits;  // [rows, vocab], written by each replay
};
#else
struct CudaStepGraphs::Graph {
  int64_t rows = 0;
};
#endif

CudaStepGraphs::~CudaStepGraphs() = default;

std::vector<int64_t> CudaStepGraphs::Buckets(int64_t capacity) {
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b < capacity; b *= 2) sizes.push_back(b);
  if (capacity >= 1) sizes.push_back(capacity);
  return sizes;
}

int64_t CudaStepGraphs::max_rows() const { return graphs_.empty() ? 0 : graphs_.back()->rows; }

absl::StatusOr<std::unique_ptr<CudaStepGraphs>> CudaStepGraphs::Capture(models::PerformerLM decoder,
                                                                        StatePool& pool) {
#if PERFORMER_TORCH_CUDA
  if (!pool.positions().is_cuda()) {
    return absl::FailedPreconditionError("CUDA graphs need the state pool on a GPU");
  }
  const int64_t capacity = pool.capacity();
  std::unique_ptr<CudaStepGraphs> graphs(new CudaStepGraphs());
  c10::InferenceMode inference;
  graphs->tokens_ = torch::zeros({capacity}, pool.positions().options());
  graphs->positions_ = pool.positions();
  const c10::DeviceIndex device = pool.positions().device().index();
  try {
    torch::cuda::synchronize(device);  // the pool's reset, on the current stream
    {
      // Captured on a side stream (as PyTorch requires), thread-locally so
      // that other threads' CUDA calls meanwhile are not part of it.
      c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(false, device));
      for (int64_t rows : Buckets(capacity)) {
        auto graph = std::make_unique<Graph>();
        graph->rows = rows;
        const std::vector<SlotRows> view = pool.Rows(0, rows, /*live_length=*/1);
        const torch::Tensor tokens = graphs->tokens_.narrow(0, 0, rows);
        // Warm-up: lazy initialisation (cuBLAS workspaces, the allocator's
        // blocks) happens outside the capture.
        for (int i = 0; i < 2; ++i) {
          view.front().positions.zero_();
          (void)decoder->Step(tokens, view);
        }
        view.front().positions.zero_();
        graph->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
        graph->logits = decoder->Step(tokens, view);
        graph->graph.capture_end();
        graphs->graphs_.push_back(std::move(graph));
      }
      c10::cuda::getCurrentCUDAStream(device).synchronize();
    }
  } catch (const std::exception& e) {
    pool.ResetRows(0, capacity);
    return absl::InternalError(absl::StrCat("capturing the decode step failed: ", e.what()));
  }
  pool.ResetRows(0, capacity);
  return graphs;
#else
  (void)decoder;
  (void)pool;
  return absl::UnimplementedError("CUDA graphs need a LibTorch built with CUDA");
#endif
}

torch::Tensor CudaStepGraphs::Replay(const torch::Tensor& tokens, int64_t count) {
#if PERFORMER_TORCH_CUDA
  Graph* graph = nullptr;
  for (const auto& g : graphs_) {
    if (g->rows >= count) {
      graph = g.get();
      break;
    }
  }
  TORCH_CHECK(graph != nullptr && count >= 1, "no CUDA graph for a step of ", count, " rows");
  tokens_.narrow(0, 0, count).copy_(tokens);
  // Padding rows start from position 0, whatever a released sequence left.
  if (graph->rows > count) positions_.narrow(0, count, graph->rows - count).zero_();
  graph->graph.replay();
  return graph->logits.narrow(0, 0, count);
#else
  (void)tokens;
  TORCH_CHECK(false, "CUDA graphs need a LibTorch built with CUDA (", count, " rows)");
  return torch::Tensor();
#endif
}

}  // namespace performer::decoding
