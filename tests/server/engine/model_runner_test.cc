#include "server/engine/model_runner.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "tests/server/engine/fake_sequence_decoder.h"

namespace performer::server {
namespace {

std::unique_ptr<ScheduledSequence> Seq(std::vector<int64_t> prompt) {
  auto s = std::make_unique<ScheduledSequence>();
  s->request.prompt = std::move(prompt);
  s->stream = std::make_shared<RequestStream>();
  return s;
}

class ModelRunnerTest : public ::testing::Test {
 protected:
  ModelRunnerTest() {
    auto decoder = std::make_unique<fake::FakeSequenceDecoder>(/*vocab=*/10, /*capacity=*/2);
    decoder_ = decoder.get();
    runner_ = std::make_unique<ModelRunner>(std::move(decoder));
  }
  fake::FakeSequenceDecoder* decoder_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_F(ModelRunnerTest, AFirstChunkTakesASlotAndPrefillsTheRestExtend) {
  auto s = Seq({1, 2, 3, 4, 5});
  absl::StatusOr<torch::Tensor> first = runner_->Prefill({s.get(), 0, 3, /*first=*/true});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(s->has_slot);
  EXPECT_EQ(first->argmax().item<int64_t>(), 4);  // after token 3
  absl::StatusOr<torch::Tensor> rest = runner_->Prefill({s.get(), 3, 5, /*first=*/false});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->argmax().item<int64_t>(), 6);  // after token 5
  EXPECT_EQ(decoder_->calls().prefill_tokens, (std::vector<int64_t>{3}));
  EXPECT_EQ(decoder_->calls().extend_tokens, (std::vector<int64_t>{2}));
}

TEST_F(ModelRunnerTest, FirstChunksPrefilledTogetherHaveOneResultEach) {
  decoder_->FailAt("prefill", 2, fake::FakeFailure::kStatus);
  auto a = Seq({1, 2, 3});
  auto b = Seq({4, 5});
  auto c = Seq({6});
  const PrefillChunk ca{a.get(), 0, 2, true}, cb{b.get(), 0, 2, true}, cc{c.get(), 0, 1, true};
  EXPECT_TRUE(ca.Batchable());
  EXPECT_FALSE((PrefillChunk{a.get(), 2, 3, false}.Batchable()));
  const std::vector<absl::StatusOr<torch::Tensor>> got = runner_->PrefillFirst({&ca, &cb, &cc});
  ASSERT_EQ(got.size(), 3u);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_EQ(got[0]->argmax().item<int64_t>(), 3);  // after token 2
  EXPECT_TRUE(absl::IsInternal(got[1].status())) << got[1].status();
  // Capacity 2: the third gets no slot.
  EXPECT_TRUE(absl::IsResourceExhausted(got[2].status())) << got[2].status();
  EXPECT_TRUE(a->has_slot);
  EXPECT_TRUE(b->has_slot);
  EXPECT_FALSE(c->has_slot);
}

TEST_F(ModelRunnerTest, AStepFeedsEachSequenceItsLastTokenInBatchOrder) {
  auto a = Seq({1});
  auto b = Seq({2});
  ASSERT_TRUE(runner_->Prefill({a.get(), 0, 1, true}).ok());
  ASSERT_TRUE(runner_->Prefill({b.get(), 0, 1, true}).ok());
  a->last_token = 7;
  b->last_token = 3;
  absl::StatusOr<torch::Tensor> logits = runner_->Step({b.get(), a.get()});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ((*logits)[0].argmax().item<int64_t>(), 4);
  EXPECT_EQ((*logits)[1].argmax().item<int64_t>(), 8);
}

TEST_F(ModelRunnerTest, WhatTheDecoderThrowsComesBackAsAStatus) {
  decoder_->FailAt("step", 1, fake::FakeFailure::kThrow);
  decoder_->FailAt("extend", 1, fake::FakeFailure::kOutOfMemory);
  auto s = Seq({1, 2});
  ASSERT_TRUE(runner_->Prefill({s.get(), 0, 1, true}).ok());
  absl::StatusOr<torch::Tensor> extended = runner_->Prefill({s.get(), 1, 2, false});
  EXPECT_TRUE(absl::IsResourceExhausted(extended.status())) << extended.status();
  s->last_token = 1;
  absl::StatusOr<torch::Tensor> stepped = runner_->Step({s.get()});
  EXPECT_TRUE(absl::IsInternal(stepped.status())) << stepped.status();
}

TEST_F(ModelRunnerTest, ReleaseFreesTheSlotOnce) {
  auto a = Seq({1});
  auto b = Seq({1});
  auto c = Seq({1});
  ASSERT_TRUE(runner_->Prefill({a.get(), 0, 1, true}).ok());
  ASSERT_TRUE(runner_->Prefill({b.get(), 0, 1, true}).ok());
  // Both slots are taken: the third cannot get one.
  EXPECT_TRUE(absl::IsResourceExhausted(runner_->Prefill({c.get(), 0, 1, true}).status()));
  EXPECT_FALSE(c->has_slot);
  runner_->Release(*a);
  runner_->Release(*a);  // a second release does nothing
  EXPECT_FALSE(a->has_slot);
  EXPECT_EQ(decoder_->calls().releases, 1);
  EXPECT_TRUE(runner_->Prefill({c.get(), 0, 1, true}).ok());
}

}  // namespace
}  // namespace performer::server
