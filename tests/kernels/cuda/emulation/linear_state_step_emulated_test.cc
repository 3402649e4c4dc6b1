// The state kernels of kernels/cuda/linear_state_step_cuda.cu run on the
// host (cuda_emulation.h): each step kernel (row blocks, vectors, clusters)
// against the CPU op, and the scan
// against the row-block step token by token, bit for bit (their shared body,
// StepRowBlock), whatever the split of the tokens and the other sequences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/linear_state_step.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

namespace emulated = cuda_emulated;

float* F(torch::Tensor& t) { return t.data_ptr<float>(); }
const float* F(const torch::Tensor& t) { return t.data_ptr<float>(); }

void ExpectClose(const torch::Tensor& got, const torch::Tensor& expected, const std::string& what) {
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-5))
      << what << ": max |diff| " << (got - expected).abs().max().item<float>();
}

void ExpectLaunched(const char* error) { ASSERT_EQ(error, nullptr) << error; }

// One kind of step or scan: its arguments over C sequences of H heads.
enum class Kind { kPlain, kNormalized, kFavor, kProjected };

constexpr int64_t kHeads = 2, kFeatures = 16, kDims = 8, kHeadDim = 12;

// Inputs of T tokens of C sequences (token-major, as the scans take them)
// and the C * H states with their sums and key maxima.
struct Problem {
  Kind kind;
  int64_t c, t, m, e;
  torch::Tensor q, k, v, u, diag, x, projection_t;  // [C, T, H, *], [C, T, 2, H, *]
  torch::Tensor state, sums, key_max;

  Problem(Kind kind_, int64_t sequences, int64_t tokens, int64_t features, int64_t dims,
          uint64_t seed)
      : kind(kind_), c(sequences), t(tokens), m(features), e(dims) {
    torch::manual_seed(static_cast<int64_t>(seed));
    q = torch::rand({c, t, kHeads, m}) + 0.1;
    k = torch::rand({c, t, kHeads, m}) + 0.1;
    v = torch::randn({c, t, kHeads, e});
    u = torch::randn({c, t, 2, kHeads, m});
    diag = torch::rand({c, t, 2, kHeads});
    x = torch::randn({c, t, 2, kHeads, kHeadDim}) * 0.5;
    projection_t = torch::randn({kHeadDim, m}) * 0.3;
    state = torch::zeros({c * kHeads, m, e + 1});
    sums = torch::zeros({c * kHeads, e + 1});
    key_max = torch::full({c * kHeads}, -1e30);
  }
  // A copy that runs on states of its own (the inputs are shared, read
  // only; a plain copy shares the states too).
  Problem Copy() const {
    Problem p = *this;
    p.state = state.clone(), p.sums = sums.clone(), p.key_max = key_max.clone();
    return p;
  }
  // Tokens [begin, end) of sequences [first, first + count), with fresh
  // states for them.
  Problem Part(int64_t first, int64_t count, int64_t begin, int64_t end) const {
    Problem p = *this;
    p.c = count;
    p.t = end - begin;
    auto cut = [&](const torch::Tensor& in) {
      return in.narrow(0, first, count).narrow(1, begin, end - begin).contiguous();
    };
    p.q = cut(q), p.k = cut(k), p.v = cut(v), p.u = cut(u), p.diag = cut(diag), p.x = cut(x);
    p.state = torch::zeros({count * kHeads, m, e + 1});
    p.sums = torch::zeros({count * kHeads, e + 1});
    p.key_max = torch::full({count * kHeads}, -1e30);
    return p;
  }
  bool favor() const { return kind == Kind::kFavor || kind == Kind::kProjected; }
  bool normalized() const { return kind != Kind::kPlain; }
  int64_t out_columns() const { return normalized() ? e : e + 1; }
};

// The launch arguments of `p`'s inputs and states (the fields of
// kernels/cuda/linear_state_step_launch.cc); inputs hold T tokens.
emulated::LinearStateStepArgs Args(Problem& p, const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& u,
                                   const torch::Tensor& diag, const torch::Tensor& x,
                                   torch::Tensor& out) {
  emulated::LinearStateStepArgs a{};
  a.state = F(p.state);
  a.pool = p.state.size(0);
  a.rows = p.state.size(0);
  a.features = p.m;
  a.columns = p.e + 1;
  a.v = F(v);
  a.out = F(out);
  const double ratio = 1.0 / std::sqrt(static_cast<double>(p.m));
  switch (p.kind) {
    case Kind::kPlain:
      a.q = F(q), a.k = F(k);
      break;
    case Kind::kNormalized:
      a.q = F(q), a.k = F(k);
      a.normalize = true, a.sums = F(p.sums), a.scale = 0.25f, a.offset = 0.01f, a.eps = 1e-6f;
      break;
    case Kind::kFavor:
    case Kind::kProjected:
      a.normalize = true, a.sums = F(p.sums);
      a.scale = static_cast<float>(ratio * ratio);
      a.offset = static_cast<float>(ratio * ratio * 1e-4);
      a.eps = static_cast<float>(1e-6 * ratio);
      a.key_max = F(p.key_max), a.heads = kHeads, a.kernel_eps = 1e-4f;
      if (p.kind == Kind::kFavor) {
        a.projections = F(u), a.diag = F(diag);
      } else {
        a.head_inputs = F(x), a.projection_t = F(p.projection_t), a.head_dim = kHeadDim;
        a.diag_scale = static_cast<float>(0.5 / std::sqrt(static_cast<double>(kHeadDim)));
      }
      break;
  }
  return a;
}

// The scan kernel over all of p's tokens: [C, T, H, out columns].
torch::Tensor Scan(Problem& p) {
  torch::Tensor out = torch::empty({p.c, p.t, kHeads, p.out_columns()});
  emulated::LinearStateScanArgs s{Args(p, p.q, p.k, p.v, p.u, p.diag, p.x, out), p.t, kHeads};
  ExpectLaunched(emulated::LinearStateScanForward(s, 0, nullptr));
  return out;
}

// The same tokens by `step` (a step launcher), one launch per token.
torch::Tensor Steps(Problem& p,
                    const std::function<const char*(const emulated::LinearStateStepArgs&)>& step) {
  std::vector<torch::Tensor> outs;
  for (int64_t i = 0; i < p.t; ++i) {
    auto token = [&](const torch::Tensor& in) { return in.select(1, i).contiguous(); };
    const torch::Tensor q = token(p.q), k = token(p.k), v = token(p.v), u = token(p.u);
    const torch::Tensor diag = token(p.diag), x = token(p.x);
    torch::Tensor out = torch::empty({p.c, kHeads, p.out_columns()});
    ExpectLaunched(step(Args(p, q, k, v, u, diag, x, out)));
    outs.push_back(out);
  }
  return torch::stack(outs, 1);
}

const char* RowBlockStep(const emulated::LinearStateStepArgs& a) {
  return emulated::LinearStateStepForward(a, nullptr);
}

// The CPU op over all of p's tokens (its own states): [C, T, H, out columns].
torch::Tensor CpuScan(Problem& p) {
  switch (p.kind) {
    case Kind::kPlain: {
      auto rows = [&](const torch::Tensor& in) {
        return in.transpose(1, 2).reshape({p.c * kHeads, p.t, in.size(-1)}).contiguous();
      };
      return LinearStateScan(p.state, rows(p.q), rows(p.k), rows(p.v))
          .view({p.c, kHeads, p.t, p.e + 1})
          .transpose(1, 2);
    }
    case Kind::kNormalized:
      return LinearStateScanNormalized(p.state, p.q, p.k, p.v, p.sums, 0.25, 0.01, 1e-6);
    case Kind::kFavor:
      return FavorStateScan(p.state, p.key_max, p.sums, p.u, p.diag, p.v, 1e-4, 1e-6);
    case Kind::kProjected:
      return FavorProjectedStateScan(p.state, p.key_max, p.sums, p.x, p.projection_t, p.v, 1e-4,
                                     1e-6);
  }
  return {};
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kPlain:
      return "plain";
    case Kind::kNormalized:
      return "normalized";
    case Kind::kFavor:
      return "favor";
    case Kind::kProjected:
      return "projected";
  }
  return "?";
}

const Kind kKinds[] = {Kind::kPlain, Kind::kNormalized, Kind::kFavor, Kind::kProjected};

void ExpectSameStates(const Problem& a, const Problem& b, const std::string& what) {
  EXPECT_TRUE(torch::equal(a.state, b.state)) << what << ": states differ";
  EXPECT_TRUE(torch::equal(a.sums, b.sums)) << what << ": sums differ";
  EXPECT_TRUE(torch::equal(a.key_max, b.key_max)) << what << ": key maxima differ";
}

TEST(LinearStateStepEmulationTest, TheStepKernelsMatchTheCpu) {
  for (Kind kind : kKinds) {
    SCOPED_TRACE(KindName(kind));
    const Problem base(kind, 3, 3, 256, kDims, 11);
    Problem rows = base.Copy(), vectors = base.Copy(), host = base.Copy();
    const torch::Tensor expected = CpuScan(host);
    ExpectClose(Steps(rows, RowBlockStep), expected, "row blocks");
    ExpectClose(rows.state, host.state, "row blocks' state");
    // The vector kernel, its rows split over blocks (a workspace of sums).
    const torch::Tensor by_vectors = Steps(vectors, [](const emulated::LinearStateStepArgs& a) {
      const emulated::VectorStepPlan plan = emulated::VectorStepPlanFor(a, 0);
      EXPECT_TRUE(plan.supported);
      EXPECT_GT(plan.splits, 1);
      std::vector<float> workspace(static_cast<size_t>(plan.workspace_floats), 0.0f);
      return emulated::LinearStateStepVectorForward(a, plan, workspace.data(), nullptr);
    });
    ExpectClose(by_vectors, expected, "vectors");
    ExpectClose(vectors.state, host.state, "vectors' state");
    ExpectClose(vectors.sums, host.sums, "vectors' sums");
    // The cluster kernel: a row's features over the kStepClusterSize blocks
    // of a cluster, their sums added through distributed shared memory.
    ASSERT_TRUE(emulated::ClusterStepSupported(0));
    Problem clusters = base.Copy();
    const torch::Tensor by_clusters = Steps(clusters, [](const emulated::LinearStateStepArgs& a) {
      return emulated::LinearStateStepClusterForward(a, nullptr);
    });
    ExpectClose(by_clusters, expected, "clusters");
    ExpectClose(clusters.state, host.state, "clusters' state");
    ExpectClose(clusters.sums, host.sums, "clusters' sums");
    ExpectClose(clusters.key_max, host.key_max, "clusters' key maxima");
  }
}

TEST(LinearStateStepEmulationTest, SlotsPickStatesAndAnOutOfRangeSlotGivesNaN) {
  torch::manual_seed(5);
  torch::Tensor state = torch::rand({4, kFeatures, kDims + 1});
  const torch::Tensor before = state.clone();
  const torch::Tensor q = torch::rand({3, kFeatures}), k = torch::rand({3, kFeatures});
  const torch::Tensor v = torch::randn({3, kDims});
  std::vector<int64_t> slots = {3, 0, 9};
  torch::Tensor out = torch::empty({3, kDims + 1});
  emulated::LinearStateStepArgs a{};
  a.state = F(state), a.slots = slots.data(), a.pool = 4, a.rows = 3;
  a.features = kFeatures, a.columns = kDims + 1;
  a.q = F(q), a.k = F(k), a.v = F(v), a.out = F(out);
  ExpectLaunched(emulated::LinearStateStepForward(a, nullptr));
  torch::Tensor host = before.clone();
  const torch::Tensor expected =
      LinearStateStep(host, q.narrow(0, 0, 2), k.narrow(0, 0, 2), v.narrow(0, 0, 2), {},
                      torch::tensor({3, 0}, torch::kLong));
  ExpectClose(out.narrow(0, 0, 2), expected, "rows 0 and 1");
  EXPECT_TRUE(torch::isnan(out[2]).all().item<bool>());
  ExpectClose(state, host, "states");
  EXPECT_TRUE(torch::equal(state[1], before[1]) && torch::equal(state[2], before[2]));
}

TEST(LinearStateStepEmulationTest, AScanHasTheStepsBitsWhateverTheSplitAndTheOtherSequences) {
  for (Kind kind : kKinds) {
    SCOPED_TRACE(KindName(kind));
    const Problem base(kind, 3, 11, kFeatures, kDims, 17);
    Problem whole = base.Copy();
    const torch::Tensor all = Scan(whole);
    // Token by token through the row-block step kernel.
    Problem stepped = base.Copy();
    EXPECT_TRUE(torch::equal(Steps(stepped, RowBlockStep), all)) << "steps' outputs differ";
    ExpectSameStates(stepped, whole, "steps");
    // 4 + 7 tokens: the second scan continues the first's states.
    Problem head = base.Part(0, 3, 0, 4);
    const torch::Tensor first = Scan(head);
    Problem tail = base.Part(0, 3, 4, 11);
    tail.state = head.state, tail.sums = head.sums, tail.key_max = head.key_max;
    EXPECT_TRUE(torch::equal(torch::cat({first, Scan(tail)}, 1), all)) << "4 + 7 differs";
    ExpectSameStates(tail, whole, "4 + 7");
    // Sequence 1 alone.
    Problem alone = base.Part(1, 1, 0, 11);
    EXPECT_TRUE(torch::equal(Scan(alone), all.narrow(0, 1, 1))) << "sequence 1 alone differs";
    // The CPU.
    Problem host = base.Copy();
    ExpectClose(all, CpuScan(host), "out");
    ExpectClose(whole.state, host.state, "state");
  }
}

// 1,024 x 65 floats (260 KiB) do not fit in a block's shared memory: the
// scan keeps the state in global memory, with the same bits.
TEST(LinearStateStepEmulationTest, AStateTooLargeForSharedMemoryHasTheStepsBits) {
  const Problem base(Kind::kNormalized, 1, 3, 1024, 64, 23);
  Problem scanned = base.Copy(), stepped = base.Copy(), host = base.Copy();
  const torch::Tensor all = Scan(scanned);
  EXPECT_TRUE(torch::equal(Steps(stepped, RowBlockStep), all));
  ExpectSameStates(stepped, scanned, "steps");
  ExpectClose(all, CpuScan(host), "out");
}

TEST(LinearStateStepEmulationTest, AScanRefusesSlotsAndARaggedHeadCount) {
  Problem p(Kind::kNormalized, 1, 2, kFeatures, kDims, 29);
  torch::Tensor out = torch::empty({1, 2, kHeads, kDims});
  emulated::LinearStateScanArgs s{Args(p, p.q, p.k, p.v, p.u, p.diag, p.x, out), 2, kHeads};
  std::vector<int64_t> slots = {0, 1};
  s.step.slots = slots.data();
  EXPECT_STREQ(emulated::LinearStateScanForward(s, 0, nullptr),
               "a scan steps every state, without slots");
  s.step.slots = nullptr;
  s.heads = 3;
  EXPECT_STREQ(emulated::LinearStateScanForward(s, 0, nullptr),
               "a scan needs T >= 0 and rows a multiple of H >= 1");
}

}  // namespace
}  // namespace performer::kernels
