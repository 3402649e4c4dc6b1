// SlotPoolDecoder, the SequenceDecoder contract shared by every slot-pool
// decoder, over a toy model: each sequence's state is one pool row of three
// numbers (tokens fed, their sum, the last one) and its logits are that row
// padded with zeros, so that every answer says which state it came from.
// What is tested is the base's part: refused arguments never reach a hook,
// step logits come back in the caller's order, a release moves the last
// row into the hole, Snapshot / Restore carry a state between sequences,
// consecutive prompts of one length prefill as one batch, and an exception
// thrown by a hook is a status that leaves the sequence as it was.
#include "core/decoding/slot_pool_decoder.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/decoding/sequence_decoder.h"
#include "core/decoding/slot_table.h"
#include "core/recurrent/slot_state.h"
#include "core/recurrent/state_pool.h"
#include "core/recurrent/state_snapshot.h"

namespace performer::decoding {
namespace {

constexpr int64_t kVocab = 8;
constexpr int64_t kMaxSeqLen = 6;
constexpr int64_t kStateSize = 3;  // tokens fed, their sum, the last one

// What a hook throws when it is entered.
enum class Failure { kNone, kTorchCheck, kOutOfMemory, kBadAlloc, kStdException };

// The logits of a state (count, sum, last): the state, then zeros.
torch::Tensor Logits(float count, float sum, float last) {
  return torch::cat({torch::tensor({count, sum, last}), torch::zeros({kVocab - kStateSize})});
}

class ToyDecoder : public SlotPoolDecoder {
 public:
  explicit ToyDecoder(int64_t capacity)
      : SlotPoolDecoder(Info(capacity), torch::Device(torch::kCPU), Pool(capacity)) {}

  static DecoderInfo Info(int64_t capacity) {
    DecoderInfo info;
    info.model_class = "toy";
    info.vocab_size = kVocab;
    info.max_seq_len = kMaxSeqLen;
    info.capacity = capacity;
    info.state_bytes_per_sequence = 999;  // the pool's figure replaces it
    return info;
  }

  static StatePool Pool(int64_t capacity) {
    SlotTensorSpec spec;
    spec.shape = {kStateSize};
    spec.empty_value = 0.0;
    const std::vector<std::vector<SlotTensorSpec>> layers = {{spec}};
    return StatePool(layers, capacity, torch::TensorOptions().dtype(torch::kFloat));
  }

  Failure failure = Failure::kNone;
  int hook_calls = 0;                                // PrefillSlot, ExtendSlot, StepSlots
  std::vector<std::pair<int64_t, int64_t>> batches;  // PrefillSlots: (first, count)
  std::vector<int64_t> extend_positions;             // ExtendSlot's `position`
  SlotTable::StepPlan last_plan;                     // StepSlots' plan

 protected:
  torch::Tensor PrefillSlot(int64_t slot, const PrefillRequest& request) override {
    Enter();
    pool().ResetRows(slot, 1);
    return Feed(slot, request.prompt);
  }

  torch::Tensor PrefillSlots(int64_t first,
                             const std::vector<const PrefillRequest*>& requests) override {
    batches.emplace_back(first, static_cast<int64_t>(requests.size()));
    return SlotPoolDecoder::PrefillSlots(first, requests);
  }

  torch::Tensor ExtendSlot(int64_t slot, int64_t position, const torch::Tensor& tokens) override {
    Enter();
    extend_positions.push_back(position);
    std::vector<int64_t> values;
    for (int64_t i = 0; i < tokens.size(0); ++i) values.push_back(tokens[i].item<int64_t>());
    return Feed(slot, values);
  }

  torch::Tensor StepSlots(const SlotTable::StepPlan& plan, const torch::Tensor& tokens) override {
    Enter();
    last_plan = plan;
    std::vector<torch::Tensor> rows;
    for (size_t i = 0; i < plan.slots.size(); ++i) {
      rows.push_back(Feed(plan.slots[i], {tokens[static_cast<int64_t>(i)].item<int64_t>()}));
    }
    return torch::stack(rows);
  }

 private:
  void Enter() {
    ++hook_calls;
    if (failure == Failure::kTorchCheck) {
      TORCH_CHECK(false, "injected failure");
    }
    if (failure == Failure::kOutOfMemory) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "injected out of memory");
    }
    if (failure == Failure::kBadAlloc) throw std::bad_alloc();
    if (failure == Failure::kStdException) throw std::runtime_error("injected runtime error");
  }

  // Feeds `tokens` to pool row `slot` (state and position) and returns the
  // logits of the state after them.
  torch::Tensor Feed(int64_t slot, const std::vector<int64_t>& tokens) {
    const std::vector<SlotRows> rows = pool().Rows(slot, 1, 1);
    const torch::Tensor state = rows.front().tensors.front()[0];  // [kStateSize]
    for (int64_t token : tokens) {
      state[0].add_(1);
      state[1].add_(token);
      state[2].fill_(token);
    }
    rows.front().positions.add_(static_cast<int64_t>(tokens.size()));
    return torch::cat({state, torch::zeros({kVocab - kStateSize}, state.options())});
  }
};

// `count` copies of `token`.
std::vector<int64_t> Tokens(int64_t count, int64_t token) {
  return std::vector<int64_t>(static_cast<size_t>(count), token);
}

PrefillRequest Prompt(std::vector<int64_t> tokens) {
  PrefillRequest request;
  request.prompt = std::move(tokens);
  return request;
}

bool Mentions(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

SequenceId CreateOk(SequenceDecoder& decoder) {
  absl::StatusOr<SequenceId> id = decoder.Create();
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : SequenceId{0};
}

int64_t PositionOk(const SequenceDecoder& decoder, SequenceId id) {
  absl::StatusOr<int64_t> position = decoder.Position(id);
  EXPECT_TRUE(position.ok()) << position.status();
  return position.ok() ? *position : -1;
}

// Create + Prefill, checking the prefill's logits against the toy model.
SequenceId Started(SequenceDecoder& decoder, const std::vector<int64_t>& prompt) {
  const SequenceId id = CreateOk(decoder);
  absl::StatusOr<torch::Tensor> logits = decoder.Prefill(id, Prompt(prompt));
  EXPECT_TRUE(logits.ok()) << logits.status();
  float sum = 0;
  for (int64_t token : prompt) sum += static_cast<float>(token);
  if (logits.ok()) {
    EXPECT_TRUE(torch::equal(
        *logits, Logits(static_cast<float>(prompt.size()), sum, static_cast<float>(prompt.back()))))
        << *logits;
  }
  return id;
}

void ExpectSameState(const StateSnapshot& actual, const StateSnapshot& expected) {
  EXPECT_EQ(actual.position, expected.position);
  ASSERT_EQ(actual.layers.size(), expected.layers.size());
  for (size_t i = 0; i < actual.layers.size(); ++i) {
    ASSERT_EQ(actual.layers[i].size(), expected.layers[i].size());
    for (size_t j = 0; j < actual.layers[i].size(); ++j) {
      EXPECT_TRUE(torch::equal(actual.layers[i][j], expected.layers[i][j]))
          << i << "," << j << ": " << actual.layers[i][j] << " vs " << expected.layers[i][j];
    }
  }
}

// The info is the subclass's, with the state bytes the pool gives: one row
// of three float32 and the int64 position.
TEST(SlotPoolDecoderTest, InfoTakesTheStateBytesFromThePool) {
  ToyDecoder decoder(3);
  EXPECT_EQ(decoder.info().model_class, "toy");
  EXPECT_EQ(decoder.info().capacity, 3);
  EXPECT_EQ(decoder.info().vocab_size, kVocab);
  EXPECT_EQ(decoder.info().max_seq_len, kMaxSeqLen);
  EXPECT_EQ(
      decoder.info().state_bytes_per_sequence,
      kStateSize * static_cast<int64_t>(sizeof(float)) + static_cast<int64_t>(sizeof(int64_t)));
  EXPECT_FALSE(decoder.info().cuda_graphs);
}

// Refused arguments are statuses of the SlotTable's codes, and no hook runs
// for them.
TEST(SlotPoolDecoderTest, RefusedArgumentsNeverReachAHook) {
  ToyDecoder decoder(2);
  const SequenceId a = CreateOk(decoder);
  CreateOk(decoder);
  EXPECT_EQ(decoder.Create().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(decoder.active(), 2);

  const SequenceId unknown = a + 100;
  EXPECT_EQ(decoder.Prefill(unknown, Prompt({1})).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(decoder.Prefill(a, Prompt({})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder.Prefill(a, Prompt(Tokens(kMaxSeqLen + 1, 1))).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(decoder.Prefill(a, Prompt({1, kVocab})).status().code(),
            absl::StatusCode::kInvalidArgument);
  PrefillRequest with_source = Prompt({1});
  with_source.source = {1};
  const absl::Status source = decoder.Prefill(a, with_source).status();
  EXPECT_EQ(source.code(), absl::StatusCode::kInvalidArgument) << source;
  EXPECT_TRUE(Mentions(source, "source")) << source;
  EXPECT_EQ(decoder.Step({a}, {1}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decoder.Extend(a, {1}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decoder.Snapshot(a).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decoder.Position(unknown).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(decoder.Release(unknown).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(decoder.hook_calls, 0);
  EXPECT_EQ(PositionOk(decoder, a), 0);

  ASSERT_TRUE(decoder.Prefill(a, Prompt({1, 2})).ok());
  EXPECT_EQ(decoder.hook_calls, 1);
  EXPECT_EQ(decoder.Prefill(a, Prompt({1})).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decoder.Step({a, a}, {1, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder.Step({a}, {1, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder.Step({a}, {kVocab}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder.Extend(a, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder.Extend(a, Tokens(kMaxSeqLen - 1, 1)).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(decoder.hook_calls, 1);
  EXPECT_EQ(PositionOk(decoder, a), 2);

  // At max_seq_len a sequence takes no further step.
  ASSERT_TRUE(decoder.Extend(a, Tokens(kMaxSeqLen - 2, 1)).ok());
  EXPECT_EQ(PositionOk(decoder, a), kMaxSeqLen);
  const absl::Status full = decoder.Step({a}, {1}).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kOutOfRange) << full;
  EXPECT_EQ(decoder.hook_calls, 2);
}

// Step hands StepSlots the plan in slot order (tokens with it) and gives
// back the logits in the caller's order; sequences left out do not move.
TEST(SlotPoolDecoderTest, StepReturnsLogitsInTheCallersOrder) {
  ToyDecoder decoder(4);
  const SequenceId a = Started(decoder, {1});
  const SequenceId b = Started(decoder, {2, 2});
  const SequenceId c = Started(decoder, {3, 3, 3});
  const SequenceId d = Started(decoder, {4});

  absl::StatusOr<torch::Tensor> logits = decoder.Step({d, a, c}, {5, 6, 7});
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->dim(), 2);
  EXPECT_EQ(logits->size(0), 3);
  EXPECT_EQ(logits->size(1), kVocab);
  EXPECT_EQ(logits->scalar_type(), torch::kFloat);
  EXPECT_TRUE(logits->device().is_cpu());
  EXPECT_TRUE(torch::equal((*logits)[0], Logits(2, 9, 5))) << *logits;   // d
  EXPECT_TRUE(torch::equal((*logits)[1], Logits(2, 7, 6))) << *logits;   // a
  EXPECT_TRUE(torch::equal((*logits)[2], Logits(4, 16, 7))) << *logits;  // c
  EXPECT_EQ(decoder.last_plan.slots, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(decoder.last_plan.tokens, (std::vector<int64_t>{6, 7, 5}));
  EXPECT_FALSE(decoder.last_plan.contiguous);
  EXPECT_EQ(PositionOk(decoder, a), 2);
  EXPECT_EQ(PositionOk(decoder, b), 2);
  EXPECT_EQ(PositionOk(decoder, c), 4);
  EXPECT_EQ(PositionOk(decoder, d), 2);

  // Every sequence, reversed: one contiguous range.
  absl::StatusOr<torch::Tensor> all = decoder.Step({d, c, b, a}, {1, 1, 1, 1});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(decoder.last_plan.contiguous);
  EXPECT_TRUE(torch::equal((*all)[0], Logits(3, 10, 1))) << *all;  // d
  EXPECT_TRUE(torch::equal((*all)[1], Logits(5, 17, 1))) << *all;  // c
  EXPECT_TRUE(torch::equal((*all)[2], Logits(3, 5, 1))) << *all;   // b
  EXPECT_TRUE(torch::equal((*all)[3], Logits(3, 8, 1))) << *all;   // a
}

// Extend hands ExtendSlot the sequence's position before the chunk and
// advances it by the chunk's length.
TEST(SlotPoolDecoderTest, ExtendFeedsTheChunkAtTheSequencesPosition) {
  ToyDecoder decoder(2);
  Started(decoder, {7});
  const SequenceId id = Started(decoder, {1, 2});
  absl::StatusOr<torch::Tensor> first = decoder.Extend(id, {3, 4});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(torch::equal(*first, Logits(4, 10, 4))) << *first;
  absl::StatusOr<torch::Tensor> second = decoder.Extend(id, {5});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(torch::equal(*second, Logits(5, 15, 5))) << *second;
  EXPECT_EQ(decoder.extend_positions, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(PositionOk(decoder, id), 5);
}

// Releasing an earlier sequence moves the last one's pool row into the
// hole: it keeps its whole state and steps from its new row.
TEST(SlotPoolDecoderTest, ReleaseMovesTheLastRowIntoTheHole) {
  ToyDecoder decoder(3);
  const SequenceId a = Started(decoder, {1, 2});
  const SequenceId b = Started(decoder, {3});
  const SequenceId c = Started(decoder, {4, 4, 4});
  absl::StatusOr<StateSnapshot> before = decoder.Snapshot(c);
  ASSERT_TRUE(before.ok()) << before.status();

  ASSERT_TRUE(decoder.Release(a).ok());
  EXPECT_EQ(decoder.active(), 2);
  EXPECT_EQ(decoder.Position(a).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(decoder.Release(a).code(), absl::StatusCode::kNotFound);
  absl::StatusOr<StateSnapshot> after = decoder.Snapshot(c);
  ASSERT_TRUE(after.ok()) << after.status();
  ExpectSameState(*after, *before);
  EXPECT_EQ(PositionOk(decoder, c), 3);

  absl::StatusOr<torch::Tensor> logits = decoder.Step({c, b}, {1, 2});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(decoder.last_plan.slots, (std::vector<int64_t>{0, 1}));  // c is in row 0 now
  EXPECT_TRUE(decoder.last_plan.contiguous);
  EXPECT_TRUE(torch::equal((*logits)[0], Logits(4, 13, 1))) << *logits;  // c
  EXPECT_TRUE(torch::equal((*logits)[1], Logits(2, 5, 2))) << *logits;   // b

  // Releasing the last row moves nothing; a new sequence takes the freed
  // row, reset by its prefill.
  ASSERT_TRUE(decoder.Release(b).ok());
  const SequenceId d = Started(decoder, {5});
  absl::StatusOr<torch::Tensor> next = decoder.Step({c, d}, {0, 0});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(torch::equal((*next)[0], Logits(5, 13, 0))) << *next;
  EXPECT_TRUE(torch::equal((*next)[1], Logits(2, 5, 0))) << *next;
}

// A snapshot taken out of one sequence and restored into a new one makes
// it continue exactly as the original; the original is not changed.
TEST(SlotPoolDecoderTest, SnapshotRestoreRoundTrip) {
  ToyDecoder decoder(3);
  const SequenceId original = Started(decoder, {1, 2, 3});
  absl::StatusOr<StateSnapshot> snapshot = decoder.Snapshot(original);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->position, 3);
  ASSERT_EQ(snapshot->layers.size(), 1u);
  ASSERT_EQ(snapshot->layers[0].size(), 1u);
  EXPECT_TRUE(torch::equal(snapshot->layers[0][0], torch::tensor({3.0f, 6.0f, 3.0f})))
      << snapshot->layers[0][0];
  EXPECT_TRUE(decoder.CheckSnapshot(*snapshot).ok());

  const SequenceId copy = CreateOk(decoder);
  const int hooks = decoder.hook_calls;
  ASSERT_TRUE(decoder.Restore(copy, *snapshot).ok());
  EXPECT_EQ(decoder.hook_calls, hooks);  // no prefill ran
  EXPECT_EQ(PositionOk(decoder, copy), 3);
  absl::StatusOr<StateSnapshot> restored = decoder.Snapshot(copy);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ExpectSameState(*restored, *snapshot);

  absl::StatusOr<torch::Tensor> logits = decoder.Step({copy, original}, {4, 4});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_TRUE(torch::equal((*logits)[0], (*logits)[1])) << *logits;
  EXPECT_TRUE(torch::equal((*logits)[0], Logits(4, 10, 4))) << *logits;
  EXPECT_EQ(PositionOk(decoder, copy), 4);
  EXPECT_EQ(PositionOk(decoder, original), 4);

  // Only a new sequence is restored.
  EXPECT_EQ(decoder.Restore(copy, *snapshot).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decoder.Restore(copy + 100, *snapshot).code(), absl::StatusCode::kNotFound);
}

// A snapshot at a position outside 1..max_seq_len, or of another layout,
// is refused by Restore and CheckSnapshot alike; a refused Restore leaves
// the sequence new (it can still be prefilled, not stepped).
TEST(SlotPoolDecoderTest, RestoreRefusesAnotherLayoutOrPosition) {
  ToyDecoder decoder(2);
  const SequenceId original = Started(decoder, {1, 2});
  absl::StatusOr<StateSnapshot> snapshot = decoder.Snapshot(original);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  const SequenceId target = CreateOk(decoder);

  for (int64_t position : {int64_t{0}, kMaxSeqLen + 1}) {
    StateSnapshot moved = *snapshot;
    moved.position = position;
    EXPECT_EQ(decoder.CheckSnapshot(moved).code(), absl::StatusCode::kOutOfRange) << position;
    EXPECT_EQ(decoder.Restore(target, moved).code(), absl::StatusCode::kOutOfRange) << position;
  }
  StateSnapshot at_limit = *snapshot;
  at_limit.position = kMaxSeqLen;
  EXPECT_TRUE(decoder.CheckSnapshot(at_limit).ok());

  StateSnapshot shape = *snapshot;
  shape.layers[0][0] = torch::zeros({kStateSize + 1});
  StateSnapshot dtype = *snapshot;
  dtype.layers[0][0] = torch::zeros({kStateSize}, torch::kDouble);
  StateSnapshot layers = *snapshot;
  layers.layers.emplace_back();
  for (const StateSnapshot* bad : {&shape, &dtype, &layers}) {
    EXPECT_EQ(decoder.CheckSnapshot(*bad).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(decoder.Restore(target, *bad).code(), absl::StatusCode::kInvalidArgument);
  }

  EXPECT_EQ(PositionOk(decoder, target), 0);
  EXPECT_EQ(decoder.Step({target}, {1}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decoder.Snapshot(target).status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<torch::Tensor> prefilled = decoder.Prefill(target, Prompt({5}));
  ASSERT_TRUE(prefilled.ok()) << prefilled.status();
  EXPECT_TRUE(torch::equal(*prefilled, Logits(1, 5, 5))) << *prefilled;
}

// Prompts of one length in consecutive slots go to PrefillSlots as one
// batch; each result is its own prompt's logits.
TEST(SlotPoolDecoderTest, PrefillBatchRunsConsecutiveEqualPromptsAsOneBatch) {
  ToyDecoder decoder(4);
  CreateOk(decoder);  // slot 0 stays out of the batch
  const SequenceId a = CreateOk(decoder);
  const SequenceId b = CreateOk(decoder);
  const SequenceId c = CreateOk(decoder);
  const std::vector<PrefillItem> items = {
      {a, Prompt({1, 2})}, {b, Prompt({3, 4})}, {c, Prompt({5, 6})}};
  const std::vector<absl::StatusOr<torch::Tensor>> results = decoder.PrefillBatch(items);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(decoder.batches, (std::vector<std::pair<int64_t, int64_t>>{{1, 3}}));
  const std::vector<torch::Tensor> expected = {Logits(2, 3, 2), Logits(2, 7, 4), Logits(2, 11, 6)};
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_TRUE(torch::equal(*results[i], expected[i])) << i << ": " << *results[i];
    EXPECT_EQ(PositionOk(decoder, items[i].id), 2);
  }
}

// Any other set is prefilled one sequence at a time (no PrefillSlots
// call): one item, prompts of different lengths, slots out of order, or an
// item that fails its checks, whose result is its own error.
TEST(SlotPoolDecoderTest, PrefillBatchRunsOtherSetsOneByOne) {
  ToyDecoder decoder(4);
  const SequenceId a = CreateOk(decoder);
  const SequenceId b = CreateOk(decoder);
  const SequenceId c = CreateOk(decoder);
  const SequenceId d = CreateOk(decoder);

  std::vector<absl::StatusOr<torch::Tensor>> one = decoder.PrefillBatch({{a, Prompt({1})}});
  ASSERT_EQ(one.size(), 1u);
  ASSERT_TRUE(one[0].ok()) << one[0].status();
  EXPECT_TRUE(torch::equal(*one[0], Logits(1, 1, 1)));

  // b and c consecutive but of different lengths.
  std::vector<absl::StatusOr<torch::Tensor>> lengths =
      decoder.PrefillBatch({{b, Prompt({2})}, {c, Prompt({3, 3})}});
  ASSERT_EQ(lengths.size(), 2u);
  ASSERT_TRUE(lengths[0].ok() && lengths[1].ok());
  EXPECT_TRUE(torch::equal(*lengths[0], Logits(1, 2, 2)));
  EXPECT_TRUE(torch::equal(*lengths[1], Logits(2, 6, 3)));
  EXPECT_TRUE(decoder.batches.empty());

  // a is prefilled already: its own FailedPrecondition, d still prefilled.
  std::vector<absl::StatusOr<torch::Tensor>> failing =
      decoder.PrefillBatch({{a, Prompt({4})}, {d, Prompt({4})}});
  ASSERT_EQ(failing.size(), 2u);
  EXPECT_EQ(failing[0].status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(failing[1].ok()) << failing[1].status();
  EXPECT_TRUE(torch::equal(*failing[1], Logits(1, 4, 4)));
  EXPECT_TRUE(decoder.batches.empty());
  EXPECT_EQ(PositionOk(decoder, a), 1);
  EXPECT_EQ(PositionOk(decoder, d), 1);
}

// Items given in descending slot order are not one range: one by one, each
// result in the items' order.
TEST(SlotPoolDecoderTest, PrefillBatchOfSlotsOutOfOrderRunsOneByOne) {
  ToyDecoder decoder(2);
  const SequenceId a = CreateOk(decoder);
  const SequenceId b = CreateOk(decoder);
  std::vector<absl::StatusOr<torch::Tensor>> results =
      decoder.PrefillBatch({{b, Prompt({2, 1})}, {a, Prompt({1, 1})}});
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0].ok() && results[1].ok());
  EXPECT_TRUE(torch::equal(*results[0], Logits(2, 3, 1)));  // b
  EXPECT_TRUE(torch::equal(*results[1], Logits(2, 2, 1)));  // a
  EXPECT_TRUE(decoder.batches.empty());
  EXPECT_EQ(decoder.hook_calls, 2);
}

// What a hook throws comes out as a status naming the call: out of memory
// (device or host) as ResourceExhausted, anything else as Internal.
TEST(SlotPoolDecoderTest, HookExceptionsBecomeStatuses) {
  ToyDecoder decoder(2);
  const SequenceId a = Started(decoder, {1});
  const SequenceId fresh = CreateOk(decoder);

  decoder.failure = Failure::kTorchCheck;
  const absl::Status check = decoder.Step({a}, {1}).status();
  EXPECT_EQ(check.code(), absl::StatusCode::kInternal) << check;
  EXPECT_TRUE(Mentions(check, "decode step")) << check;
  EXPECT_TRUE(Mentions(check, "injected failure")) << check;

  decoder.failure = Failure::kOutOfMemory;
  const absl::Status device_memory = decoder.Prefill(fresh, Prompt({1})).status();
  EXPECT_EQ(device_memory.code(), absl::StatusCode::kResourceExhausted) << device_memory;
  EXPECT_TRUE(Mentions(device_memory, "prefill")) << device_memory;
  EXPECT_TRUE(Mentions(device_memory, "injected out of memory")) << device_memory;

  decoder.failure = Failure::kBadAlloc;
  const absl::Status host_memory = decoder.Extend(a, {1}).status();
  EXPECT_EQ(host_memory.code(), absl::StatusCode::kResourceExhausted) << host_memory;
  EXPECT_TRUE(Mentions(host_memory, "extend")) << host_memory;

  decoder.failure = Failure::kStdException;
  const absl::Status other = decoder.Step({a}, {1}).status();
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal) << other;
  EXPECT_TRUE(Mentions(other, "injected runtime error")) << other;
  EXPECT_EQ(decoder.hook_calls, 5);  // Started's prefill and the four above
}

// A call whose hook threw leaves the sequence as it was: no position
// advanced, no prefill marked, so that the same calls then succeed.
TEST(SlotPoolDecoderTest, AFailedHookLeavesTheSequenceAsItWas) {
  ToyDecoder decoder(3);
  const SequenceId a = Started(decoder, {1});
  const SequenceId b = CreateOk(decoder);
  const SequenceId c = CreateOk(decoder);

  decoder.failure = Failure::kTorchCheck;
  EXPECT_FALSE(decoder.Step({a}, {2}).ok());
  EXPECT_FALSE(decoder.Extend(a, {2, 2}).ok());
  EXPECT_FALSE(decoder.Prefill(b, Prompt({3})).ok());
  // A batch that throws fails every item.
  std::vector<absl::StatusOr<torch::Tensor>> batch =
      decoder.PrefillBatch({{b, Prompt({3})}, {c, Prompt({4})}});
  ASSERT_EQ(batch.size(), 2u);
  for (const absl::StatusOr<torch::Tensor>& result : batch) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal) << result.status();
  }
  EXPECT_EQ(PositionOk(decoder, a), 1);
  EXPECT_EQ(PositionOk(decoder, b), 0);
  EXPECT_EQ(PositionOk(decoder, c), 0);
  EXPECT_EQ(decoder.Snapshot(b).status().code(), absl::StatusCode::kFailedPrecondition);

  decoder.failure = Failure::kNone;
  absl::StatusOr<torch::Tensor> step = decoder.Step({a}, {2});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(torch::equal((*step)[0], Logits(2, 3, 2))) << *step;
  std::vector<absl::StatusOr<torch::Tensor>> again =
      decoder.PrefillBatch({{b, Prompt({3})}, {c, Prompt({4})}});
  ASSERT_EQ(again.size(), 2u);
  ASSERT_TRUE(again[0].ok() && again[1].ok());
  EXPECT_TRUE(torch::equal(*again[0], Logits(1, 3, 3)));
  EXPECT_TRUE(torch::equal(*again[1], Logits(1, 4, 4)));
  EXPECT_EQ(PositionOk(decoder, b), 1);
  EXPECT_EQ(PositionOk(decoder, c), 1);
}

}  // namespace
}  // namespace performer::decoding
