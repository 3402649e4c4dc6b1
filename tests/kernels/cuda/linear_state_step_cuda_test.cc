// CUDA fused decode step against the CPU kernel (its reference), for each
// CUDA kernel (CudaStepKernel): the measured row-block kernel, the vector
// kernel with its split rows and the cluster kernel.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda_row_invariance.h"
#include "kernels/linear_state_step.h"
#include "tests/testing/cuda_device.h"

#if PERFORMER_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace performer::kernels {
namespace {

struct StepShape {
  int64_t rows, features, dims;
  bool decay, sums, slots;
};

// Readable parameters in test listings (GoogleTest would print the raw
// bytes, padding included).
void PrintTo(const StepShape& s, std::ostream* os) {
  *os << "R" << s.rows << " M" << s.features << " E" << s.dims << (s.decay ? " decay" : "")
      << (s.sums ? " sums" : "") << (s.slots ? " slots" : "");
}

// "Rows", "Vector" or "Cluster": in test names and listings.
const char* KernelName(CudaStepKernel kernel) {
  switch (kernel) {
    case CudaStepKernel::kVectorSplit:
      return "Vector";
    case CudaStepKernel::kClusterSplit:
      return "Cluster";
    default:
      return "Rows";
  }
}

}  // namespace

void PrintTo(CudaStepKernel kernel, std::ostream* os) { *os << KernelName(kernel); }

namespace {

using StepParam = std::tuple<StepShape, CudaStepKernel>;

std::string ShapeName(const ::testing::TestParamInfo<StepParam>& info) {
  const StepShape& s = std::get<0>(info.param);
  return std::string(KernelName(std::get<1>(info.param))) + "R" + std::to_string(s.rows) + "M" +
         std::to_string(s.features) + "E" + std::to_string(s.dims) + (s.decay ? "Decay" : "") +
         (s.sums ? "Sums" : "") + (s.slots ? "Slots" : "");
}

// Selects the parameter's CUDA kernel for the test, and restores the
// previous one after it.
class StepKernelTest : public ::testing::TestWithParam<StepParam> {
 protected:
  static StepShape Shape() { return std::get<0>(GetParam()); }
  const ScopedCudaStepKernel kernel_{std::get<1>(GetParam())};
};

// A pool twice the batch with the rows scattered over it, or the identity.
torch::Tensor MakeSlots(const StepShape& s) {
  if (!s.slots) return {};
  return torch::randperm(2 * s.rows + 1, torch::kLong).narrow(0, 0, s.rows).contiguous();
}

int64_t PoolSize(const StepShape& s) { return s.slots ? 2 * s.rows + 1 : s.rows; }

torch::Tensor Cuda(const torch::Tensor& t) { return t.defined() ? t.cuda() : t; }

// float32 with a different summation order than the CPU: relative 1e-4, and
// an absolute floor for the read-outs, which are sums of M products of mixed
// sign (states are updated elementwise, so they agree more closely).
void ExpectClose(const torch::Tensor& got, const torch::Tensor& expected, const char* what) {
  const torch::Tensor g = got.cpu();
  const double atol = std::string(what) == "out" ? 1e-4 : 1e-5;
  EXPECT_TRUE(torch::allclose(g, expected, 1e-4, atol))
      << what << ": max |diff| " << (g - expected).abs().max().item<float>();
}

// Empty FAVOR+ pools of `pool` states (M features, E value columns): the
// states, key maxima (-1e30) and sums on the CPU and their copies on the GPU.
struct FavorPools {
  torch::Tensor cpu_state, cpu_sums, cpu_max, gpu_state, gpu_sums, gpu_max;
};

FavorPools EmptyFavorPools(int64_t pool, int64_t m, int64_t e) {
  FavorPools p;
  p.cpu_state = torch::zeros({pool, m, e + 1});
  p.cpu_sums = torch::zeros({pool, e + 1});
  p.cpu_max = torch::full({pool}, -1e30);
  p.gpu_state = p.cpu_state.cuda();
  p.gpu_sums = p.cpu_sums.cuda();
  p.gpu_max = p.cpu_max.cuda();
  return p;
}

class LinearStateStepCudaTest : public StepKernelTest {};

TEST_P(LinearStateStepCudaTest, MatchesCpuKernelOverSeveralSteps) {
  PERFORMER_REQUIRE_CUDA();
  const StepShape s = Shape();
  torch::manual_seed(31);
  const torch::Tensor slots = MakeSlots(s);
  torch::Tensor cpu_state = torch::randn({PoolSize(s), s.features, s.dims + 1});
  torch::Tensor gpu_state = cpu_state.cuda();
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor q = torch::rand({s.rows, s.features});
    const torch::Tensor k = torch::rand({s.rows, s.features});
    const torch::Tensor v = torch::randn({s.rows, s.dims});
    const torch::Tensor decay = s.decay ? torch::rand({s.rows}) : torch::Tensor();
    const torch::Tensor expected = LinearStateStep(cpu_state, q, k, v, decay, slots);
    const torch::Tensor got =
        LinearStateStep(gpu_state, q.cuda(), k.cuda(), v.cuda(), Cuda(decay), Cuda(slots));
    ExpectClose(got, expected, "out");
    ExpectClose(gpu_state, cpu_state, "state");
  }
}

TEST_P(LinearStateStepCudaTest, NormalizedMatchesCpuKernel) {
  PERFORMER_REQUIRE_CUDA();
  const StepShape s = Shape();
  torch::manual_seed(32);
  const torch::Tensor slots = MakeSlots(s);
  torch::Tensor cpu_state = torch::rand({PoolSize(s), s.features, s.dims + 1});
  torch::Tensor gpu_state = cpu_state.cuda();
  torch::Tensor cpu_sums = s.sums ? torch::rand({PoolSize(s), s.dims + 1}) : torch::Tensor();
  torch::Tensor gpu_sums = Cuda(cpu_sums);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor q = torch::rand({s.rows, s.features});
    const torch::Tensor k = torch::rand({s.rows, s.features});
    const torch::Tensor v = torch::randn({s.rows, s.dims});
    const torch::Tensor decay = s.decay ? torch::rand({s.rows}) : torch::Tensor();
    const torch::Tensor expected =
        LinearStateStepNormalized(cpu_state, q, k, v, decay, cpu_sums, 0.3, 0.02, 1e-3, slots);
    const torch::Tensor got =
        LinearStateStepNormalized(gpu_state, q.cuda(), k.cuda(), v.cuda(), Cuda(decay), gpu_sums,
                                  0.3, 0.02, 1e-3, Cuda(slots));
    ExpectClose(got, expected, "out");
    ExpectClose(gpu_state, cpu_state, "state");
    if (s.sums) ExpectClose(gpu_sums, cpu_sums, "sums");
  }
}

TEST_P(LinearStateStepCudaTest, FavorMatchesCpuKernelWithAGrowingKeyMaximum) {
  PERFORMER_REQUIRE_CUDA();
  const StepShape s = Shape();
  torch::manual_seed(33);
  // Rows = B * H with H = 1 for odd row counts.
  const int64_t heads = s.rows % 2 == 0 ? 2 : 1, batch = s.rows / heads;
  const torch::Tensor slots = MakeSlots(s);
  const int64_t pool = PoolSize(s);
  FavorPools p = EmptyFavorPools(pool, s.features, s.dims);
  for (int step = 0; step < 4; ++step) {
    // The scale grows with the step, so the running key maximum moves and
    // the state is rescaled (decay < 1) at later steps.
    const torch::Tensor projections = torch::randn({batch, 2, heads, s.features}) * (0.5 + step);
    const torch::Tensor diag = torch::rand({batch, 2, heads});
    const torch::Tensor v = torch::randn({s.rows, s.dims});
    const torch::Tensor expected =
        FavorStateStep(p.cpu_state, p.cpu_max, p.cpu_sums, projections, diag, v, 1e-4, 1e-6, slots);
    const torch::Tensor got = FavorStateStep(p.gpu_state, p.gpu_max, p.gpu_sums, projections.cuda(),
                                             diag.cuda(), v.cuda(), 1e-4, 1e-6, Cuda(slots));
    ExpectClose(got, expected, "out");
    ExpectClose(p.gpu_state, p.cpu_state, "state");
    ExpectClose(p.gpu_sums, p.cpu_sums, "sums");
    ExpectClose(p.gpu_max, p.cpu_max, "key_max");
  }
}

// The projection in the step (FavorProjectedStateStep): u and diag formed
// in the state kernel's launch from each head's query and key, against the
// CPU's matrix product and step. D = 24 (not a multiple of the warp) and 64.
TEST_P(LinearStateStepCudaTest, FavorProjectedMatchesCpuWithAGrowingKeyMaximum) {
  PERFORMER_REQUIRE_CUDA();
  const StepShape s = Shape();
  torch::manual_seed(35);
  const int64_t heads = s.rows % 2 == 0 ? 2 : 1, batch = s.rows / heads;
  const int64_t d = s.features >= 256 ? 64 : 24;
  const torch::Tensor slots = MakeSlots(s);
  const int64_t pool = PoolSize(s);
  FavorPools p = EmptyFavorPools(pool, s.features, s.dims);
  const torch::Tensor projection_t =
      torch::randn({d, s.features}) * std::pow(static_cast<double>(d), -0.25);
  for (int step = 0; step < 4; ++step) {
    const torch::Tensor x = torch::randn({batch, 2, heads, d}) * (0.5 + step);
    const torch::Tensor v = torch::randn({s.rows, s.dims});
    const torch::Tensor expected = FavorProjectedStateStep(p.cpu_state, p.cpu_max, p.cpu_sums, x,
                                                           projection_t, v, 1e-4, 1e-6, slots);
    const torch::Tensor got =
        FavorProjectedStateStep(p.gpu_state, p.gpu_max, p.gpu_sums, x.cuda(), projection_t.cuda(),
                                v.cuda(), 1e-4, 1e-6, Cuda(slots));
    ExpectClose(got, expected, "out");
    ExpectClose(p.gpu_state, p.cpu_state, "state");
    ExpectClose(p.gpu_sums, p.cpu_sums, "sums");
    ExpectClose(p.gpu_max, p.cpu_max, "key_max");
  }
}

// The vector kernel takes shapes with M (E + 1) % 4 == 0 (the others run the
// row-block kernel under either setting); R = 1 and 3 split rows over blocks.
// The cluster kernel takes every shape: M 1 and 17 leave blocks of a
// cluster without features.
INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearStateStepCudaTest,
    ::testing::Combine(
        ::testing::Values(
            StepShape{1, 1, 1, false, false, false}, StepShape{1, 17, 33, false, false, false},
            StepShape{1, 17, 33, true, true, true}, StepShape{3, 33, 17, true, false, true},
            StepShape{64, 17, 33, false, true, false}, StepShape{64, 17, 33, true, true, true},
            StepShape{64, 256, 64, true, true, false}, StepShape{8, 266, 300, true, true, true},
            StepShape{1, 256, 64, true, true, true}, StepShape{3, 20, 32, true, true, true},
            StepShape{64, 18, 33, false, true, true}, StepShape{8, 268, 300, true, true, false}),
        ::testing::Values(CudaStepKernel::kRowBlocks, CudaStepKernel::kVectorSplit,
                          CudaStepKernel::kClusterSplit)),
    ShapeName);

// Checks run once per CUDA kernel.
class CudaStepKernelTest : public ::testing::TestWithParam<CudaStepKernel> {
 protected:
  const ScopedCudaStepKernel kernel_{GetParam()};
};

// A FAVOR+ step over pools of `rows` states: the state, key maxima and sums
// in place, the per-row inputs (on the state's device), the output.
using FavorStep =
    std::function<torch::Tensor(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                                const std::vector<torch::Tensor>& inputs)>;

// Captures `step` in a CUDA graph over device inputs of `shapes` (zeros),
// then 3 times draws inputs (draw(step index)), copies them in, replays
// and compares the output, state and key maxima with `step` on the CPU.
void ExpectGraphReplaysEqualCpuSteps(int64_t rows, int64_t m, int64_t e,
                                     const std::vector<std::vector<int64_t>>& shapes,
                                     const std::function<std::vector<torch::Tensor>(int)>& draw,
                                     const FavorStep& step) {
#if PERFORMER_TORCH_CUDA
  FavorPools p = EmptyFavorPools(rows, m, e);
  std::vector<torch::Tensor> inputs;
  for (const std::vector<int64_t>& shape : shapes) {
    inputs.push_back(torch::zeros(shape, torch::kCUDA));
  }
  torch::Tensor out;
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
    // Warm-up outside the capture, on copies, so the real state starts clean.
    torch::Tensor s = p.gpu_state.clone(), z = p.gpu_sums.clone(), k = p.gpu_max.clone();
    step(s, k, z, inputs);
    graph.capture_begin();
    out = step(p.gpu_state, p.gpu_max, p.gpu_sums, inputs);
    graph.capture_end();
    c10::cuda::getCurrentCUDAStream().synchronize();
  }
  for (int i = 0; i < 3; ++i) {
    const std::vector<torch::Tensor> drawn = draw(i);
    for (size_t j = 0; j < inputs.size(); ++j) inputs[j].copy_(drawn[j]);
    graph.replay();
    const torch::Tensor expected = step(p.cpu_state, p.cpu_max, p.cpu_sums, drawn);
    ExpectClose(out, expected, "out");
    ExpectClose(p.gpu_state, p.cpu_state, "state");
    ExpectClose(p.gpu_max, p.cpu_max, "key_max");
  }
#else
  (void)rows, (void)m, (void)e, (void)shapes, (void)draw, (void)step;
#endif
}

// The server replays the decode step from CUDA graphs: the vector kernel's
// split allocates and zeroes its workspace inside the capture, so a replay
// must zero it again (the tickets of the last replay must not carry over).
TEST_P(CudaStepKernelTest, FavorStepGraphReplaysEqualTheCpuSteps) {
  PERFORMER_REQUIRE_CUDA();
  torch::manual_seed(34);
  const int64_t batch = 1, heads = 8, m = 256, e = 64, rows = batch * heads;
  ExpectGraphReplaysEqualCpuSteps(
      rows, m, e, {{batch, 2, heads, m}, {batch, 2, heads}, {rows, e}},
      [&](int i) {
        return std::vector<torch::Tensor>{torch::randn({batch, 2, heads, m}) * (0.5 + i),
                                          torch::rand({batch, 2, heads}), torch::randn({rows, e})};
      },
      [](torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
         const std::vector<torch::Tensor>& in) {
        return FavorStateStep(state, key_max, sums, in[0], in[1], in[2], 1e-4, 1e-6);
      });
}

// The projected step from a CUDA graph (the decoder's default on a GPU),
// at the default model's shape: B = 2, 8 heads, D 64, M 256, E 64.
TEST_P(CudaStepKernelTest, FavorProjectedStepGraphReplaysEqualTheCpuSteps) {
  PERFORMER_REQUIRE_CUDA();
  torch::manual_seed(36);
  const int64_t batch = 2, heads = 8, m = 256, e = 64, d = 64, rows = batch * heads;
  const torch::Tensor projection_t = torch::randn({d, m}) * std::pow(64.0, -0.25);
  const torch::Tensor gpu_projection_t = Cuda(projection_t);
  ExpectGraphReplaysEqualCpuSteps(
      rows, m, e, {{batch, 2, heads, d}, {rows, e}},
      [&](int i) {
        return std::vector<torch::Tensor>{torch::randn({batch, 2, heads, d}) * (0.5 + i),
                                          torch::randn({rows, e})};
      },
      [&](torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
          const std::vector<torch::Tensor>& in) {
        const torch::Tensor& p = state.is_cuda() ? gpu_projection_t : projection_t;
        return FavorProjectedStateStep(state, key_max, sums, in[0], p, in[1], 1e-4, 1e-6);
      });
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaStepKernelTest,
                         ::testing::Values(CudaStepKernel::kRowBlocks, CudaStepKernel::kVectorSplit,
                                           CudaStepKernel::kClusterSplit),
                         [](const ::testing::TestParamInfo<CudaStepKernel>& info) {
                           return std::string(KernelName(info.param));
                         });

TEST(LinearStateStepCudaChecks, SupportedAndDeviceMismatch) {
  PERFORMER_REQUIRE_CUDA();
  torch::Tensor state = torch::zeros({2, 4, 3}, torch::kCUDA);
  EXPECT_TRUE(LinearStateStepSupported(state));
  EXPECT_FALSE(LinearStateStepSupported(state.transpose(1, 2)));
  EXPECT_THROW(LinearStateStep(state, torch::ones({2, 4}), torch::ones({2, 4}, torch::kCUDA),
                               torch::ones({2, 2}, torch::kCUDA)),
               c10::Error);
}

TEST_P(CudaStepKernelTest, OutOfRangeSlotGivesNanAndTouchesNoState) {
  PERFORMER_REQUIRE_CUDA();
  torch::Tensor state = torch::ones({3, 4, 3}, torch::kCUDA);
  const torch::Tensor q = torch::ones({2, 4}, torch::kCUDA), v = torch::ones({2, 2}, torch::kCUDA);
  const torch::Tensor slots = torch::tensor({1, 7}, torch::kLong).cuda();
  const torch::Tensor out = LinearStateStep(state, q, q, v, {}, slots).cpu();
  EXPECT_FALSE(torch::isnan(out[0]).any().item<bool>());
  EXPECT_TRUE(torch::isnan(out[1]).all().item<bool>());
  const torch::Tensor host = state.cpu();
  EXPECT_EQ(host[0].sum().item<float>(), 12.0f);
  EXPECT_EQ(host[2].sum().item<float>(), 12.0f);
  EXPECT_EQ(host[1].sum().item<float>(), 24.0f);
}

// The scans on CUDA (kernels::CudaRowInvariance(): one launch, each token
// the row-block step's body). For C = 3 sequences of H = 2 heads and 11
// tokens, each scan must give (a) the bits of the same tokens split 4 + 7
// over two scans, (b) for sequence 1, the bits of that sequence scanned
// alone (C = 1), (c) the bits of the step op called once per token, and
// (d) the CPU scan's values to float32 rounding.
struct ScanCase {
  const char* name;
  // Runs the scan of tokens [begin, end) of sequences [first, first + count)
  // on `device`, with states (and sums, key maxima) `pools` of those
  // sequences updated in place; returns [count, end - begin, H, E] (or the
  // state-major [count * H, end - begin, E + 1] of LinearStateScan).
  std::function<torch::Tensor(std::vector<torch::Tensor>& pools, int64_t first, int64_t count,
                              int64_t begin, int64_t end)>
      scan;
  std::function<std::vector<torch::Tensor>(int64_t count, torch::Device device)> pools;
  // The same tokens of every sequence by the step op, one call per token;
  // returns what `scan` returns.
  std::function<torch::Tensor(std::vector<torch::Tensor>& pools)> steps;
};

constexpr int64_t kScanHeads = 2, kScanFeatures = 16, kScanDims = 8, kScanHeadDim = 12;
constexpr int64_t kScanTokens = 11, kScanSequences = 3;

// Token t of in [C, T, H, *] as rows [C * H, *] on `device`.
torch::Tensor TokenRows(const torch::Tensor& in, int64_t t, torch::Device device) {
  return in.select(1, t).reshape({-1, in.size(-1)}).contiguous().to(device);
}

// step(t) for each of the scan's tokens, stacked along the token axis.
template <typename Step>
torch::Tensor StackSteps(Step step) {
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < kScanTokens; ++t) outs.push_back(step(t));
  return torch::stack(outs, 1);
}

std::vector<ScanCase> ScanCases() {
  torch::manual_seed(71);
  const int64_t c = kScanSequences, t = kScanTokens, h = kScanHeads, m = kScanFeatures;
  const int64_t e = kScanDims, d = kScanHeadDim;
  // Inputs on the CPU; each case moves what it reads to the pools' device.
  const torch::Tensor q = torch::rand({c, t, h, m}) + 0.1, k = torch::rand({c, t, h, m}) + 0.1;
  const torch::Tensor v = torch::randn({c, t, h, e});
  const torch::Tensor u = torch::randn({c, t, 2, h, m}), diag = torch::rand({c, t, 2, h});
  const torch::Tensor x = torch::randn({c, t, 2, h, d}) * 0.5;
  const torch::Tensor projection_t = torch::randn({d, m}) * 0.3;
  auto part = [](const torch::Tensor& in, int64_t first, int64_t count, int64_t begin, int64_t end,
                 torch::Device device) {
    return in.narrow(0, first, count).narrow(1, begin, end - begin).contiguous().to(device);
  };
  auto plain_pools = [](int64_t count, torch::Device device) {
    return std::vector<torch::Tensor>{
        torch::zeros({count * kScanHeads, kScanFeatures, kScanDims + 1},
                     torch::TensorOptions().device(device)),
        torch::zeros({count * kScanHeads, kScanDims + 1}, torch::TensorOptions().device(device))};
  };
  auto favor_pools = [](int64_t count, torch::Device device) {
    const torch::TensorOptions o = torch::TensorOptions().device(device);
    return std::vector<torch::Tensor>{
        torch::zeros({count * kScanHeads, kScanFeatures, kScanDims + 1}, o),
        torch::zeros({count * kScanHeads, kScanDims + 1}, o),
        torch::full({count * kScanHeads}, -1e30, o)};
  };
  std::vector<ScanCase> cases;
  cases.push_back({"LinearStateScan",
                   [=](std::vector<torch::Tensor>& p, int64_t first, int64_t count, int64_t begin,
                       int64_t end) {
                     const torch::Device dev = p[0].device();
                     // State-major: sequence-head rows [count * H, T, *].
                     auto rows = [&](const torch::Tensor& in) {
                       return part(in, first, count, begin, end, dev)
                           .transpose(1, 2)
                           .reshape({count * kScanHeads, end - begin, in.size(-1)})
                           .contiguous();
                     };
                     return LinearStateScan(p[0], rows(q), rows(k), rows(v));
                   },
                   plain_pools,
                   [=](std::vector<torch::Tensor>& p) {
                     const torch::Device dev = p[0].device();
                     return StackSteps([&](int64_t i) {
                       return LinearStateStep(p[0], TokenRows(q, i, dev), TokenRows(k, i, dev),
                                              TokenRows(v, i, dev));
                     });
                   }});
  cases.push_back({"LinearStateScanNormalized",
                   [=](std::vector<torch::Tensor>& p, int64_t first, int64_t count, int64_t begin,
                       int64_t end) {
                     const torch::Device dev = p[0].device();
                     return LinearStateScanNormalized(p[0], part(q, first, count, begin, end, dev),
                                                      part(k, first, count, begin, end, dev),
                                                      part(v, first, count, begin, end, dev), p[1],
                                                      0.25, 0.01, 1e-6);
                   },
                   plain_pools,
                   [=](std::vector<torch::Tensor>& p) {
                     const torch::Device dev = p[0].device();
                     return StackSteps([&](int64_t i) {
                       return LinearStateStepNormalized(p[0], TokenRows(q, i, dev),
                                                        TokenRows(k, i, dev), TokenRows(v, i, dev),
                                                        {}, p[1], 0.25, 0.01, 1e-6)
                           .view({c, h, e});
                     });
                   }});
  cases.push_back({"FavorStateScan",
                   [=](std::vector<torch::Tensor>& p, int64_t first, int64_t count, int64_t begin,
                       int64_t end) {
                     const torch::Device dev = p[0].device();
                     return FavorStateScan(p[0], p[2], p[1], part(u, first, count, begin, end, dev),
                                           part(diag, first, count, begin, end, dev),
                                           part(v, first, count, begin, end, dev), 1e-4, 1e-6);
                   },
                   favor_pools,
                   [=](std::vector<torch::Tensor>& p) {
                     const torch::Device dev = p[0].device();
                     return StackSteps([&](int64_t i) {
                       return FavorStateStep(p[0], p[2], p[1], u.select(1, i).contiguous().to(dev),
                                             diag.select(1, i).contiguous().to(dev),
                                             TokenRows(v, i, dev), 1e-4, 1e-6)
                           .view({c, h, e});
                     });
                   }});
  cases.push_back({"FavorProjectedStateScan",
                   [=](std::vector<torch::Tensor>& p, int64_t first, int64_t count, int64_t begin,
                       int64_t end) {
                     const torch::Device dev = p[0].device();
                     return FavorProjectedStateScan(
                         p[0], p[2], p[1], part(x, first, count, begin, end, dev),
                         projection_t.to(dev), part(v, first, count, begin, end, dev), 1e-4, 1e-6);
                   },
                   favor_pools,
                   [=](std::vector<torch::Tensor>& p) {
                     const torch::Device dev = p[0].device();
                     return StackSteps([&](int64_t i) {
                       return FavorProjectedStateStep(
                                  p[0], p[2], p[1], x.select(1, i).contiguous().to(dev),
                                  projection_t.to(dev), TokenRows(v, i, dev), 1e-4, 1e-6)
                           .view({c, h, e});
                     });
                   }});
  return cases;
}

TEST(LinearStateScanCudaTest, ScansRunOnCudaOnlyUnderRowInvariance) {
  PERFORMER_REQUIRE_CUDA();
  torch::Tensor state = torch::zeros({2, 4, 3}, torch::kCUDA);
  {
    const ScopedCudaRowInvariance invariant(false);
    EXPECT_FALSE(LinearStateScanSupported(state));
    EXPECT_THROW(
        LinearStateScan(state, torch::ones({2, 1, 4}, torch::kCUDA),
                        torch::ones({2, 1, 4}, torch::kCUDA), torch::ones({2, 1, 2}, torch::kCUDA)),
        c10::Error);
  }
  const ScopedCudaRowInvariance invariant(true);
  EXPECT_TRUE(LinearStateScanSupported(state));
  EXPECT_FALSE(LinearStateScanSupported(state.transpose(1, 2)));
}

TEST(LinearStateScanCudaTest, AScanHasTheStepsBitsWhateverTheSplitAndTheOtherSequences) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance invariant(true);
  const torch::Device gpu(torch::kCUDA), cpu(torch::kCPU);
  for (const ScanCase& c : ScanCases()) {
    SCOPED_TRACE(c.name);
    std::vector<torch::Tensor> whole = c.pools(kScanSequences, gpu);
    const torch::Tensor all = c.scan(whole, 0, kScanSequences, 0, kScanTokens).cpu();
    // (a) 4 + 7 tokens.
    std::vector<torch::Tensor> split = c.pools(kScanSequences, gpu);
    const torch::Tensor head = c.scan(split, 0, kScanSequences, 0, 4).cpu();
    const torch::Tensor tail = c.scan(split, 0, kScanSequences, 4, kScanTokens).cpu();
    const bool state_major = std::string(c.name) == "LinearStateScan";
    EXPECT_TRUE(torch::equal(torch::cat({head, tail}, 1), all)) << "the split's outputs differ";
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_TRUE(torch::equal(split[i].cpu(), whole[i].cpu())) << "pool " << i << " differs";
    }
    // (b) sequence 1 alone.
    std::vector<torch::Tensor> alone = c.pools(1, gpu);
    const torch::Tensor one = c.scan(alone, 1, 1, 0, kScanTokens).cpu();
    const torch::Tensor same =
        state_major ? all.narrow(0, kScanHeads, kScanHeads) : all.narrow(0, 1, 1);
    EXPECT_TRUE(torch::equal(one, same)) << "sequence 1 alone differs from it among 3";
    // (c) the step op, token by token.
    std::vector<torch::Tensor> stepped = c.pools(kScanSequences, gpu);
    EXPECT_TRUE(torch::equal(c.steps(stepped).cpu(), all)) << "the steps' outputs differ";
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_TRUE(torch::equal(stepped[i].cpu(), whole[i].cpu())) << "pool " << i << " differs";
    }
    // (d) the CPU.
    std::vector<torch::Tensor> host = c.pools(kScanSequences, cpu);
    ExpectClose(all, c.scan(host, 0, kScanSequences, 0, kScanTokens), "out");
  }
}

// A state of M (E + 1) = 1,024 x 65 floats (260 KiB) does not fit in a
// block's shared memory, so the scan keeps it in global memory: still the
// steps' bits, and the CPU's values.
TEST(LinearStateScanCudaTest, AStateTooLargeForSharedMemoryHasTheStepsBits) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance invariant(true);
  torch::manual_seed(73);
  constexpr int64_t kStates = 2, kTokens = 3, kFeatures = 1024, kDims = 64;
  const torch::TensorOptions gpu = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor q = (torch::rand({1, kTokens, kStates, kFeatures}) + 0.1).to(torch::kCUDA);
  const torch::Tensor k = (torch::rand({1, kTokens, kStates, kFeatures}) + 0.1).to(torch::kCUDA);
  const torch::Tensor v = torch::randn({1, kTokens, kStates, kDims}).to(torch::kCUDA);
  auto fresh = [&] {
    return std::vector<torch::Tensor>{torch::zeros({kStates, kFeatures, kDims + 1}, gpu),
                                      torch::zeros({kStates, kDims + 1}, gpu)};
  };
  std::vector<torch::Tensor> scanned = fresh(), stepped = fresh();
  const torch::Tensor all =
      LinearStateScanNormalized(scanned[0], q, k, v, scanned[1], 0.25, 0.01, 1e-6).cpu();
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < kTokens; ++t) {
    outs.push_back(LinearStateStepNormalized(stepped[0], q[0][t].contiguous(), k[0][t].contiguous(),
                                             v[0][t].contiguous(), {}, stepped[1], 0.25, 0.01,
                                             1e-6));
  }
  EXPECT_TRUE(torch::equal(torch::stack(outs, 0).unsqueeze(0).cpu(), all));
  EXPECT_TRUE(torch::equal(stepped[0].cpu(), scanned[0].cpu()));
  torch::Tensor host_state = torch::zeros({kStates, kFeatures, kDims + 1});
  torch::Tensor host_sums = torch::zeros({kStates, kDims + 1});
  ExpectClose(
      all,
      LinearStateScanNormalized(host_state, q.cpu(), k.cpu(), v.cpu(), host_sums, 0.25, 0.01, 1e-6),
      "out");
}

}  // namespace
}  // namespace performer::kernels
