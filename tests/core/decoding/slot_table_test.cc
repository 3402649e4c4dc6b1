// SlotTable: the slot bookkeeping and argument checks every slot-pool
// decoder shares. Each refusal has the status code of the SequenceDecoder
// contract (sequence_decoder.h), a step's plan runs in ascending slot order
// with the way back to the caller's, and a release keeps the active slots
// compact, [0, active()), by moving the last one into the hole.
#include "core/decoding/slot_table.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/decoding/sequence_decoder.h"

namespace performer::decoding {
namespace {

constexpr int64_t kVocab = 10;
constexpr int64_t kMaxSeqLen = 5;

DecoderInfo Info(int64_t capacity) {
  DecoderInfo info;
  info.model_class = "test";
  info.vocab_size = kVocab;
  info.max_seq_len = kMaxSeqLen;
  info.capacity = capacity;
  return info;
}

// `count` copies of `token`.
std::vector<int64_t> Tokens(int64_t count, int64_t token) {
  return std::vector<int64_t>(static_cast<size_t>(count), token);
}

bool Mentions(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

SequenceId CreateOk(SlotTable& table) {
  absl::StatusOr<SequenceId> id = table.Create();
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : SequenceId{0};
}

int64_t SlotOk(const SlotTable& table, SequenceId id) {
  absl::StatusOr<int64_t> slot = table.SlotOf(id);
  EXPECT_TRUE(slot.ok()) << slot.status();
  return slot.ok() ? *slot : -1;
}

int64_t PositionOk(const SlotTable& table, SequenceId id) {
  absl::StatusOr<int64_t> position = table.Position(id);
  EXPECT_TRUE(position.ok()) << position.status();
  return position.ok() ? *position : -1;
}

// Marks `id` prefilled with `tokens` tokens, as a decoder does after its
// prefill hook ran.
void Prefill(SlotTable& table, SequenceId id, int64_t tokens) {
  absl::StatusOr<int64_t> slot = table.CheckPrefill(id, Tokens(tokens, 1));
  ASSERT_TRUE(slot.ok()) << slot.status();
  table.MarkPrefilled(*slot, tokens);
}

// The slots of the live sequences are exactly [0, active()).
void ExpectCompact(const SlotTable& table, const std::vector<SequenceId>& live) {
  ASSERT_EQ(table.active(), static_cast<int64_t>(live.size()));
  std::set<int64_t> slots;
  for (SequenceId id : live) slots.insert(SlotOk(table, id));
  std::set<int64_t> expected;
  for (int64_t i = 0; i < table.active(); ++i) expected.insert(i);
  EXPECT_EQ(slots, expected);
}

// Sequences take slots 0, 1, 2, ... in creation order, new and at position
// 0; one more than capacity is ResourceExhausted and changes nothing.
TEST(SlotTableTest, CreatesUpToCapacityThenIsExhausted) {
  SlotTable table(Info(3));
  EXPECT_EQ(table.active(), 0);
  std::vector<SequenceId> ids;
  for (int64_t i = 0; i < 3; ++i) {
    ids.push_back(CreateOk(table));
    EXPECT_EQ(table.active(), i + 1);
    EXPECT_EQ(SlotOk(table, ids.back()), i);
    EXPECT_EQ(PositionOk(table, ids.back()), 0);
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[1], ids[2]);
  EXPECT_NE(ids[0], ids[2]);
  const absl::StatusOr<SequenceId> extra = table.Create();
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kResourceExhausted) << extra.status();
  EXPECT_TRUE(Mentions(extra.status(), "3")) << extra.status();
  EXPECT_EQ(table.active(), 3);
}

// Every call about an id the table never gave out is NotFound.
TEST(SlotTableTest, UnknownIdsAreNotFound) {
  SlotTable table(Info(2));
  const SequenceId known = CreateOk(table);
  for (SequenceId unknown : {SequenceId{0}, known + 1, SequenceId{12345}}) {
    SCOPED_TRACE(unknown);
    EXPECT_EQ(table.SlotOf(unknown).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(table.Position(unknown).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(table.CheckPrefill(unknown, {1}).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(table.CheckSnapshot(unknown).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(table.CheckRestore(unknown, 1).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(table.CheckExtend(unknown, {1}).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(table.PlanStep({unknown}, {1}).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(table.Release(unknown).status().code(), absl::StatusCode::kNotFound);
  }
  EXPECT_EQ(table.active(), 1);
}

// A prompt is 1..max_seq_len tokens of the vocabulary, fed once.
TEST(SlotTableTest, CheckPrefillRefusesBadPrompts) {
  SlotTable table(Info(2));
  CreateOk(table);
  const SequenceId id = CreateOk(table);

  const absl::Status empty = table.CheckPrefill(id, {}).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;

  const absl::Status too_long = table.CheckPrefill(id, Tokens(kMaxSeqLen + 1, 1)).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kOutOfRange) << too_long;
  EXPECT_TRUE(Mentions(too_long, "max_seq_len")) << too_long;

  const absl::Status past_vocab = table.CheckPrefill(id, {1, kVocab, 2}).status();
  EXPECT_EQ(past_vocab.code(), absl::StatusCode::kInvalidArgument) << past_vocab;
  EXPECT_TRUE(Mentions(past_vocab, "vocabulary")) << past_vocab;
  EXPECT_TRUE(Mentions(past_vocab, "prompt[1]")) << past_vocab;

  const absl::Status negative = table.CheckPrefill(id, {-1}).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << negative;

  // The bounds themselves are taken: one token, max_seq_len tokens, the
  // last id of the vocabulary. The answer is the sequence's slot.
  absl::StatusOr<int64_t> one = table.CheckPrefill(id, {kVocab - 1});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, 1);
  absl::StatusOr<int64_t> full = table.CheckPrefill(id, Tokens(kMaxSeqLen, 0));
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(*full, 1);

  // Checking marks nothing: the position is still 0 until MarkPrefilled.
  EXPECT_EQ(PositionOk(table, id), 0);
  table.MarkPrefilled(*one, 3);
  EXPECT_EQ(PositionOk(table, id), 3);
  const absl::Status again = table.CheckPrefill(id, {1}).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_TRUE(Mentions(again, "already prefilled")) << again;
}

// A state is taken out of a prefilled sequence only.
TEST(SlotTableTest, CheckSnapshotNeedsAPrefill) {
  SlotTable table(Info(2));
  CreateOk(table);
  const SequenceId id = CreateOk(table);
  const absl::Status before = table.CheckSnapshot(id).status();
  EXPECT_EQ(before.code(), absl::StatusCode::kFailedPrecondition) << before;
  Prefill(table, id, 2);
  absl::StatusOr<int64_t> slot = table.CheckSnapshot(id);
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_EQ(*slot, 1);
}

// A restored state is at a position 1..max_seq_len, into a new sequence.
TEST(SlotTableTest, CheckRestoreBoundsThePosition) {
  SlotTable table(Info(1));
  const SequenceId id = CreateOk(table);
  for (int64_t position : {int64_t{-1}, int64_t{0}, kMaxSeqLen + 1}) {
    const absl::Status status = table.CheckRestore(id, position).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << position << ": " << status;
  }
  for (int64_t position : {int64_t{1}, kMaxSeqLen}) {
    absl::StatusOr<int64_t> slot = table.CheckRestore(id, position);
    ASSERT_TRUE(slot.ok()) << position << ": " << slot.status();
    EXPECT_EQ(*slot, 0);
  }
  table.MarkPrefilled(0, 2);
  const absl::Status prefilled = table.CheckRestore(id, 2).status();
  EXPECT_EQ(prefilled.code(), absl::StatusCode::kFailedPrecondition) << prefilled;
}

// Extend needs a prefilled sequence, at least one token of the vocabulary,
// and room before max_seq_len for all of them.
TEST(SlotTableTest, CheckExtendBoundsTheTokens) {
  SlotTable table(Info(1));
  const SequenceId id = CreateOk(table);
  const absl::Status not_prefilled = table.CheckExtend(id, {1}).status();
  EXPECT_EQ(not_prefilled.code(), absl::StatusCode::kFailedPrecondition) << not_prefilled;

  Prefill(table, id, 3);
  EXPECT_EQ(table.CheckExtend(id, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.CheckExtend(id, {kVocab}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.CheckExtend(id, {-2}).status().code(), absl::StatusCode::kInvalidArgument);
  // 3 + 2 = max_seq_len: taken; 3 + 3 passes it.
  absl::StatusOr<int64_t> fits = table.CheckExtend(id, {1, 2});
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(*fits, 0);
  const absl::Status past = table.CheckExtend(id, {1, 2, 3}).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
  EXPECT_TRUE(Mentions(past, "max_seq_len")) << past;

  table.Advance(*fits, 2);
  EXPECT_EQ(PositionOk(table, id), kMaxSeqLen);
  EXPECT_EQ(table.CheckExtend(id, {1}).status().code(), absl::StatusCode::kOutOfRange);
}

// A step's arguments: as many tokens as ids, at least one, ids known,
// prefilled, distinct and below max_seq_len, tokens in the vocabulary.
TEST(SlotTableTest, PlanStepRefusesBadArguments) {
  SlotTable table(Info(3));
  const SequenceId a = CreateOk(table);
  const SequenceId b = CreateOk(table);
  const SequenceId fresh = CreateOk(table);
  Prefill(table, a, 2);
  Prefill(table, b, kMaxSeqLen - 1);

  const absl::Status sizes = table.PlanStep({a, b}, {1}).status();
  EXPECT_EQ(sizes.code(), absl::StatusCode::kInvalidArgument) << sizes;
  EXPECT_EQ(table.PlanStep({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.PlanStep({a, fresh + 100}, {1, 1}).status().code(), absl::StatusCode::kNotFound);

  const absl::Status unprefilled = table.PlanStep({a, fresh}, {1, 1}).status();
  EXPECT_EQ(unprefilled.code(), absl::StatusCode::kFailedPrecondition) << unprefilled;
  EXPECT_TRUE(Mentions(unprefilled, "prefilled")) << unprefilled;

  const absl::Status twice = table.PlanStep({a, b, a}, {1, 2, 3}).status();
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument) << twice;
  EXPECT_TRUE(Mentions(twice, "twice")) << twice;

  const absl::Status past_vocab = table.PlanStep({a, b}, {1, kVocab}).status();
  EXPECT_EQ(past_vocab.code(), absl::StatusCode::kInvalidArgument) << past_vocab;
  EXPECT_TRUE(Mentions(past_vocab, "vocabulary")) << past_vocab;
  EXPECT_EQ(table.PlanStep({a}, {-1}).status().code(), absl::StatusCode::kInvalidArgument);

  // b is one token below max_seq_len: it steps once, then is refused.
  absl::StatusOr<SlotTable::StepPlan> last = table.PlanStep({b}, {1});
  ASSERT_TRUE(last.ok()) << last.status();
  table.Advance(*last);
  EXPECT_EQ(PositionOk(table, b), kMaxSeqLen);
  const absl::Status full = table.PlanStep({a, b}, {1, 1}).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kOutOfRange) << full;
  EXPECT_TRUE(Mentions(full, "max_seq_len")) << full;
  // A refused plan advanced nobody.
  EXPECT_EQ(PositionOk(table, a), 2);
}

// The plan runs in ascending slot order; inverse[i] is where the caller's
// i-th sequence went, and its token went with it.
TEST(SlotTableTest, PlanStepSortsSlotsAndMapsBackToTheCallersOrder) {
  SlotTable table(Info(4));
  std::vector<SequenceId> ids;  // ids[s] is in slot s
  for (int64_t s = 0; s < 4; ++s) {
    ids.push_back(CreateOk(table));
    Prefill(table, ids.back(), s + 1);  // positions 1, 2, 3, 4
  }

  // A subset with a hole (slot 2), in the caller's order 3, 1, 0.
  const std::vector<SequenceId> caller = {ids[3], ids[1], ids[0]};
  const std::vector<int64_t> tokens = {7, 8, 9};
  absl::StatusOr<SlotTable::StepPlan> plan = table.PlanStep(caller, tokens);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->slots, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(plan->tokens, (std::vector<int64_t>{9, 8, 7}));
  EXPECT_EQ(plan->inverse, (std::vector<int64_t>{2, 1, 0}));
  EXPECT_FALSE(plan->contiguous);
  EXPECT_EQ(plan->live_length, 5);  // slot 3 is at position 4
  ASSERT_EQ(plan->inverse.size(), caller.size());
  for (size_t i = 0; i < caller.size(); ++i) {
    const auto at = static_cast<size_t>(plan->inverse[i]);
    EXPECT_EQ(plan->slots[at], SlotOk(table, caller[i])) << i;
    EXPECT_EQ(plan->tokens[at], tokens[i]) << i;
  }

  // Every slot, shuffled: one range [0, 4).
  absl::StatusOr<SlotTable::StepPlan> all =
      table.PlanStep({ids[2], ids[0], ids[3], ids[1]}, {1, 2, 3, 4});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->slots, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(all->tokens, (std::vector<int64_t>{2, 4, 1, 3}));
  EXPECT_EQ(all->inverse, (std::vector<int64_t>{2, 0, 3, 1}));
  EXPECT_TRUE(all->contiguous);
  EXPECT_EQ(all->live_length, 5);

  // A range that does not start at slot 0 is one range too; live_length
  // is the largest position after the step, here slot 2's 3 + 1.
  absl::StatusOr<SlotTable::StepPlan> middle = table.PlanStep({ids[2], ids[1]}, {5, 6});
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(middle->slots, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(middle->contiguous);
  EXPECT_EQ(middle->live_length, 4);

  // One sequence: contiguous, live_length its position + 1.
  absl::StatusOr<SlotTable::StepPlan> one = table.PlanStep({ids[0]}, {0});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->slots, (std::vector<int64_t>{0}));
  EXPECT_EQ(one->inverse, (std::vector<int64_t>{0}));
  EXPECT_TRUE(one->contiguous);
  EXPECT_EQ(one->live_length, 2);

  // Planning advances nobody.
  for (size_t s = 0; s < ids.size(); ++s) {
    EXPECT_EQ(PositionOk(table, ids[s]), static_cast<int64_t>(s) + 1);
  }
}

// Advance(plan) moves exactly the plan's sequences one position on.
TEST(SlotTableTest, AdvancingAPlanAdvancesItsSequences) {
  SlotTable table(Info(3));
  const SequenceId a = CreateOk(table);
  const SequenceId b = CreateOk(table);
  const SequenceId c = CreateOk(table);
  Prefill(table, a, 1);
  Prefill(table, b, 2);
  Prefill(table, c, 3);
  absl::StatusOr<SlotTable::StepPlan> plan = table.PlanStep({c, a}, {1, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  table.Advance(*plan);
  EXPECT_EQ(PositionOk(table, a), 2);
  EXPECT_EQ(PositionOk(table, b), 2);
  EXPECT_EQ(PositionOk(table, c), 4);
  table.Advance(*plan);
  EXPECT_EQ(PositionOk(table, a), 3);
  EXPECT_EQ(PositionOk(table, c), 5);
}

// Releasing the last active slot moves nothing; releasing an earlier one
// moves the last sequence (its slot, prefill and position) into the hole,
// so that the active slots stay [0, active()).
TEST(SlotTableTest, ReleaseKeepsTheActiveSlotsCompact) {
  SlotTable table(Info(3));
  const SequenceId a = CreateOk(table);
  const SequenceId b = CreateOk(table);
  const SequenceId c = CreateOk(table);
  Prefill(table, a, 1);
  Prefill(table, c, 4);  // b is not prefilled

  absl::StatusOr<std::optional<SlotTable::Move>> last = table.Release(c);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_FALSE(last->has_value());
  ExpectCompact(table, {a, b});
  EXPECT_EQ(table.SlotOf(c).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(SlotOk(table, a), 0);
  EXPECT_EQ(SlotOk(table, b), 1);

  // b (slot 1, not prefilled) moves into a's slot 0, which was prefilled:
  // the flag moves with it.
  absl::StatusOr<std::optional<SlotTable::Move>> moved = table.Release(a);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_TRUE(moved->has_value());
  EXPECT_EQ((*moved)->from, 1);
  EXPECT_EQ((*moved)->to, 0);
  ExpectCompact(table, {b});
  EXPECT_EQ(SlotOk(table, b), 0);
  EXPECT_EQ(PositionOk(table, b), 0);
  EXPECT_EQ(table.CheckSnapshot(b).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table.CheckPrefill(b, {1}).ok());

  // Released ids stay unknown, also to a second release.
  for (SequenceId gone : {a, c}) {
    EXPECT_EQ(table.Position(gone).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(table.Release(gone).status().code(), absl::StatusCode::kNotFound);
  }
  EXPECT_EQ(table.active(), 1);
}

// A prefilled sequence moved into a hole keeps its position and prefill.
TEST(SlotTableTest, AMovedSequenceKeepsItsPositionAndPrefill) {
  SlotTable table(Info(3));
  const SequenceId a = CreateOk(table);
  const SequenceId b = CreateOk(table);
  const SequenceId c = CreateOk(table);
  Prefill(table, a, 1);
  Prefill(table, b, 2);
  Prefill(table, c, 4);

  absl::StatusOr<std::optional<SlotTable::Move>> moved = table.Release(a);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_TRUE(moved->has_value());
  EXPECT_EQ((*moved)->from, 2);
  EXPECT_EQ((*moved)->to, 0);
  ExpectCompact(table, {b, c});
  EXPECT_EQ(SlotOk(table, c), 0);
  EXPECT_EQ(PositionOk(table, c), 4);
  EXPECT_EQ(PositionOk(table, b), 2);
  EXPECT_TRUE(table.CheckSnapshot(c).ok());
  EXPECT_EQ(table.CheckPrefill(c, {1}).status().code(), absl::StatusCode::kFailedPrecondition);

  // It steps from its new slot.
  absl::StatusOr<SlotTable::StepPlan> plan = table.PlanStep({c}, {3});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->slots, (std::vector<int64_t>{0}));
  EXPECT_EQ(plan->live_length, 5);
}

// Whatever the order of releases, the live sequences fill [0, active()).
TEST(SlotTableTest, EveryReleaseOrderStaysCompact) {
  SlotTable table(Info(6));
  std::vector<SequenceId> live;
  for (int i = 0; i < 6; ++i) live.push_back(CreateOk(table));
  // Each release picks live[pick], `live` being the survivors in creation order.
  for (size_t pick : {size_t{2}, size_t{0}, size_t{3}, size_t{1}, size_t{0}, size_t{0}}) {
    ASSERT_LT(pick, live.size());
    const SequenceId gone = live[pick];
    const int64_t freed = SlotOk(table, gone);
    const int64_t last = table.active() - 1;
    absl::StatusOr<std::optional<SlotTable::Move>> move = table.Release(gone);
    ASSERT_TRUE(move.ok()) << move.status();
    EXPECT_EQ(move->has_value(), freed != last);
    if (move->has_value()) {
      EXPECT_EQ((*move)->from, last);
      EXPECT_EQ((*move)->to, freed);
    }
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    ExpectCompact(table, live);
  }
  EXPECT_EQ(table.active(), 0);
}

// A released slot is taken by the next Create, as a new sequence: new id,
// position 0, not prefilled, whatever its previous owner had done.
TEST(SlotTableTest, AReleasedSlotIsReusedAsNew) {
  SlotTable table(Info(1));
  const SequenceId first = CreateOk(table);
  Prefill(table, first, 3);
  EXPECT_EQ(table.Create().status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<std::optional<SlotTable::Move>> released = table.Release(first);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_FALSE(released->has_value());
  EXPECT_EQ(table.active(), 0);

  const SequenceId second = CreateOk(table);
  EXPECT_NE(second, first);
  EXPECT_EQ(SlotOk(table, second), 0);
  EXPECT_EQ(PositionOk(table, second), 0);
  EXPECT_EQ(table.CheckSnapshot(second).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table.CheckPrefill(second, {1}).ok());
  EXPECT_EQ(table.Position(first).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace performer::decoding
