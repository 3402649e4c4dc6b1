// The slot form of the recurrent attentions (core/recurrent/slot_state.h)
// against their one-step-at-a-time forward: the same outputs whether a
// sequence is fed in chunks or token by token, rows at different positions
// in one call, and the pool that holds the states (state_pool.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/feature_maps/feature_map_catalogue.h"
#include "core/recurrent/key_value_slots.h"
#include "core/recurrent/recurrent_full_attention.h"
#include "core/recurrent/recurrent_linear_attention.h"
#include "core/recurrent/state_pool.h"
#include "tests/testing/fixtures.h"

namespace performer {
namespace {

constexpr int64_t kN = 2, kL = 7, kH = 2, kE = 4, kD = 3, kMaxLength = 10;

struct Qkv {
  torch::Tensor q, k, v;  // (N, L, H, E), (N, L, H, E), (N, L, H, D)
};

Qkv RandomQkv(int64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({kN, kL, kH, kE}), torch::randn({kN, kL, kH, kE}),
          torch::randn({kN, kL, kH, kD})};
}

// Token by token with the per-sequence state: (N, L, H, D).
torch::Tensor StepByStep(RecurrentAttentionImpl& attention, const Qkv& x) {
  AttentionState state;
  std::vector<torch::Tensor> outs;
  for (int64_t i = 0; i < kL; ++i) {
    outs.push_back(attention.forward(x.q.select(1, i), x.k.select(1, i), x.v.select(1, i), state));
  }
  return torch::stack(outs, 1);
}

// Tokens [from, to) of every row through the slot form, from a pool whose
// rows are at position `from`.
torch::Tensor Chunk(RecurrentAttentionImpl& attention, const Qkv& x, StatePool& pool, int64_t from,
                    int64_t to) {
  std::vector<SlotRows> rows = pool.Rows(0, kN, to);
  torch::Tensor out =
      attention.ForwardSlots(x.q.narrow(1, from, to - from), x.k.narrow(1, from, to - from),
                             x.v.narrow(1, from, to - from), rows.front());
  rows.front().positions.add_(to - from);
  return out;
}

// With `grad_mode`, the calls run with gradients enabled (none of the inputs
// requires one), where attentions with a row-invariant kernel take their
// tensor ops instead.
void ExpectChunksMatchSteps(RecurrentAttentionImpl& attention, int64_t seed,
                            bool grad_mode = false) {
  const torch::AutoGradMode mode(grad_mode);
  const Qkv x = RandomQkv(seed);
  const torch::Tensor expected = StepByStep(attention, x);
  const SlotShape shape{kH, kE, kD, kMaxLength};
  StatePool pool({attention.SlotStateSpec(shape)}, kN, torch::TensorOptions());
  // A chunk of 4 (a prompt), one step, then a chunk of 2.
  torch::Tensor out = torch::cat({Chunk(attention, x, pool, 0, 4), Chunk(attention, x, pool, 4, 5),
                                  Chunk(attention, x, pool, 5, kL)},
                                 1);
  EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-5);
}

std::shared_ptr<RecurrentLinearAttentionImpl> FavorLinear() {
  absl::StatusOr<NamedFeatureMapFactory> favor =
      MakeFeatureMapFactory("Favor", nlohmann::json{{"n_dims", 16}, {"deterministic_eval", true}});
  EXPECT_TRUE(favor.ok()) << favor.status();
  auto attention = std::make_shared<RecurrentLinearAttentionImpl>(kE, *favor);
  attention->feature_map()->new_feature_map(torch::kCPU);
  attention->feature_map()->set_frozen(true);
  return attention;
}

TEST(SlotFormTest, LinearAttentionChunksMatchSteps) {
  RecurrentLinearAttentionImpl elu(kE);
  ExpectChunksMatchSteps(elu, 1);
  ExpectChunksMatchSteps(*FavorLinear(), 2);
}

TEST(SlotFormTest, FullAttentionChunksMatchSteps) {
  RecurrentFullAttentionImpl full(std::nullopt, 0.0);
  full.eval();
  ExpectChunksMatchSteps(full, 3);
  ExpectChunksMatchSteps(full, 3, /*grad_mode=*/true);
}

TEST(SlotFormTest, StateSpecsAreExact) {
  RecurrentLinearAttentionImpl elu(kE);
  const SlotShape shape{kH, kE, kD, kMaxLength};
  // S with Z as its last column: H x F x (D + 1), F = E for elu.
  ASSERT_EQ(elu.SlotStateSpec(shape).size(), 1u);
  EXPECT_EQ(elu.SlotStateSpec(shape)[0].shape, (std::vector<int64_t>{kH, kE, kD + 1}));
  EXPECT_EQ(SlotStateBytes(elu.SlotStateSpec(shape)), kH * kE * (kD + 1) * 4);
  // Keys and values for every position a sequence may reach.
  RecurrentFullAttentionImpl full;
  EXPECT_EQ(SlotStateBytes(full.SlotStateSpec(shape)), kMaxLength * kH * (kE + kD) * 4);
  StatePool pool({full.SlotStateSpec(shape), elu.SlotStateSpec(shape)}, 3, torch::TensorOptions());
  EXPECT_EQ(pool.capacity(), 3);
  EXPECT_EQ(pool.BytesPerSequence(), SlotStateBytes(full.SlotStateSpec(shape)) +
                                         SlotStateBytes(elu.SlotStateSpec(shape)) + 8);
}

TEST(SlotFormTest, RowsAtDifferentPositionsStepTogether) {
  // Row 0 has consumed 3 tokens and row 1 5: one step of both equals each
  // row's own step-by-step output at its position.
  torch::NoGradGuard no_grad;
  RecurrentFullAttentionImpl full(std::nullopt, 0.0);
  full.eval();
  const Qkv x = RandomQkv(4);
  const torch::Tensor expected = StepByStep(full, x);
  const SlotShape shape{kH, kE, kD, kMaxLength};
  StatePool pool({full.SlotStateSpec(shape)}, kN, torch::TensorOptions());
  for (int64_t row = 0; row < kN; ++row) {
    const int64_t length = row == 0 ? 3 : 5;
    std::vector<SlotRows> rows = pool.Rows(row, 1, length);
    full.ForwardSlots(x.q.narrow(0, row, 1).narrow(1, 0, length),
                      x.k.narrow(0, row, 1).narrow(1, 0, length),
                      x.v.narrow(0, row, 1).narrow(1, 0, length), rows.front());
    rows.front().positions.add_(length);
  }
  std::vector<SlotRows> rows = pool.Rows(0, kN, 6);
  auto pick = [&](const torch::Tensor& t) { return torch::stack({t[0][3], t[1][5]}).unsqueeze(1); };
  torch::Tensor out = full.ForwardSlots(pick(x.q), pick(x.k), pick(x.v), rows.front());
  EXPECT_TENSOR_CLOSE(out.squeeze(1), pick(expected).squeeze(1), 1e-5, 1e-5);
}

TEST(SlotFormTest, PoolGathersScattersMovesAndResetsRows) {
  const std::vector<SlotTensorSpec> specs = {{{2, 3}, 0.0}, {{4}, -1.0}};
  StatePool pool({specs}, 4, torch::TensorOptions());
  std::vector<SlotRows> all = pool.Rows(0, 4, 0);
  EXPECT_TRUE(torch::equal(all[0].tensors[1], torch::full({4, 4}, -1.0)));
  all[0].tensors[0].copy_(torch::arange(24, torch::kFloat).view({4, 2, 3}));
  all[0].positions.copy_(torch::tensor({10, 11, 12, 13}, torch::kLong));
  // Gather rows 3 and 1, change them, scatter them back.
  const torch::Tensor index = torch::tensor({3, 1}, torch::kLong);
  std::vector<SlotRows> picked = pool.Gather(index, 0);
  EXPECT_TRUE(torch::equal(picked[0].positions, torch::tensor({13, 11}, torch::kLong)));
  picked[0].tensors[0].add_(100);
  picked[0].positions.add_(1);
  pool.Scatter(index, picked);
  all = pool.Rows(0, 4, 0);
  EXPECT_EQ(all[0].tensors[0][3][0][0].item<float>(), 118.0f);
  EXPECT_EQ(all[0].tensors[0][0][0][0].item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(all[0].positions, torch::tensor({10, 12, 12, 14}, torch::kLong)));
  pool.CopyRow(3, 0);
  EXPECT_TRUE(torch::equal(all[0].tensors[0][0], all[0].tensors[0][3]));
  EXPECT_EQ(all[0].positions[0].item<int64_t>(), 14);
  pool.ResetRows(0, 2);
  EXPECT_TRUE(torch::equal(all[0].tensors[1].narrow(0, 0, 2), torch::full({2, 4}, -1.0)));
  EXPECT_EQ(all[0].positions[1].item<int64_t>(), 0);
  EXPECT_EQ(all[0].positions[2].item<int64_t>(), 12);
}

TEST(SlotFormTest, AnAttentionWithoutASlotFormSaysSo) {
  class StepOnly : public RecurrentAttentionImpl {
   public:
    torch::Tensor forward(const torch::Tensor& q, const torch::Tensor&, const torch::Tensor&,
                          AttentionState&) override {
      return q;
    }
    std::string class_name() const override { return "StepOnly"; }
  };
  StepOnly attention;
  EXPECT_TRUE(attention.SlotStateSpec({1, 1, 1, 1}).empty());
  SlotRows rows;
  const torch::Tensor x = torch::zeros({1, 1, 1, 1});
  try {
    attention.ForwardSlots(x, x, x, rows);
    ADD_FAILURE() << "ForwardSlots of an attention without a slot form returned";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("StepOnly has no slot form"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace performer
