#include "server/engine/output_processor.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"

namespace performer::server {
namespace {

using generation::FinishReason;

std::unique_ptr<ScheduledSequence> Seq(generation::SamplingParams sampling,
                                       std::vector<int64_t> prompt = {1},
                                       int64_t max_buffered = 0) {
  auto s = std::make_unique<ScheduledSequence>();
  s->request.prompt = std::move(prompt);
  s->request.sampling = std::move(sampling);
  s->request.max_buffered_tokens = max_buffered;
  s->stream = std::make_shared<RequestStream>(max_buffered);
  s->accepted = absl::Now();
  s->admitted = s->accepted;
  return s;
}

generation::SamplingParams Greedy(int64_t max_new = 8) {
  generation::SamplingParams p = generation::SamplingParams::Greedy();
  p.max_new_tokens = max_new;
  return p;
}

// Logits [rows, vocab] whose row i peaks at argmax[i].
torch::Tensor Peaks(const std::vector<int64_t>& argmax, int64_t vocab) {
  torch::Tensor logits = torch::zeros({static_cast<int64_t>(argmax.size()), vocab});
  for (size_t i = 0; i < argmax.size(); ++i) logits[static_cast<int64_t>(i)][argmax[i]] = 5.0f;
  return logits;
}

TEST(OutputProcessorTest, EmitsOneTokenPerSequenceAndEndsOnLength) {
  OutputProcessor output(nullptr, /*max_seq_len=*/100, nullptr);
  auto a = Seq(Greedy(2));
  auto b = Seq(Greedy(1));
  output.Attach(*a);
  output.Attach(*b);
  EXPECT_EQ(output.Emit({a.get(), b.get()}, {Peaks({3, 4}, 8)}), 2);
  EXPECT_FALSE(a->finished());
  EXPECT_EQ(a->last_token, 3);
  EXPECT_EQ(b->finish, FinishReason::kLength);
  EXPECT_EQ(a->stream->Take().chunk.token_ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(b->stream->Take().chunk.token_ids, (std::vector<int32_t>{4}));
  EXPECT_EQ(output.Emit({a.get()}, {Peaks({5}, 8)}), 1);
  EXPECT_EQ(a->finish, FinishReason::kLength);
  EXPECT_EQ(a->generated, 2);
}

TEST(OutputProcessorTest, RowsMayComeAsSeveralTensors) {
  OutputProcessor output(nullptr, 100, nullptr);
  auto a = Seq(Greedy());
  auto b = Seq(Greedy());
  output.Attach(*a);
  output.Attach(*b);
  // Two prefills' logits, one row [vocab] each.
  EXPECT_EQ(output.Emit({a.get(), b.get()}, {Peaks({6}, 8)[0], Peaks({2}, 8)[0]}), 2);
  EXPECT_EQ(a->last_token, 6);
  EXPECT_EQ(b->last_token, 2);
}

TEST(OutputProcessorTest, StopTokensEosAndMaxSeqLen) {
  OutputProcessor output(nullptr, /*max_seq_len=*/3, nullptr);
  generation::SamplingParams stop = Greedy();
  stop.stop_token_ids = {4};
  generation::SamplingParams eos = Greedy();
  eos.eos_token_id = 5;
  auto a = Seq(stop);
  auto b = Seq(eos);
  // Its first token would be fed at position 3: past max_seq_len 3.
  auto c = Seq(Greedy(), /*prompt=*/{1, 2, 3});
  for (auto* s : {a.get(), b.get(), c.get()}) output.Attach(*s);
  output.Emit({a.get(), b.get(), c.get()}, {Peaks({4, 5, 1}, 8)});
  EXPECT_EQ(a->finish, FinishReason::kStopToken);
  EXPECT_EQ(b->finish, FinishReason::kEos);
  EXPECT_EQ(c->finish, FinishReason::kLength);
}

TEST(OutputProcessorTest, StopStringsEndTheTextAcrossTokens) {
  std::unique_ptr<Tokenizer> bytes = MakeByteTokenizer();
  OutputProcessor output(bytes.get(), 100, nullptr);
  generation::SamplingParams p = Greedy(16);
  p.stop_strings = {"cd"};
  auto s = Seq(p);
  output.Attach(*s);
  std::string text;
  for (char c : std::string("abcde")) {
    if (s->finished()) break;
    output.Emit({s.get()}, {Peaks({static_cast<unsigned char>(c)}, 256)});
    text += s->stream->Take().chunk.text;
  }
  EXPECT_EQ(s->finish, FinishReason::kStopString);
  EXPECT_EQ(text, "abcd");
  EXPECT_EQ(s->generated, 4);
}

TEST(OutputProcessorTest, LogprobsAreTheModelsLogSoftmax) {
  OutputProcessor output(nullptr, 100, nullptr);
  auto with = Seq(Greedy());
  with->request.return_logprobs = true;
  auto without = Seq(Greedy());
  output.Attach(*with);
  output.Attach(*without);
  torch::Tensor logits = torch::tensor({{0.0f, 1.0f, 2.0f}, {2.0f, 1.0f, 0.0f}});
  output.Emit({without.get(), with.get()}, {logits});
  const StreamChunk chunk = with->stream->Take().chunk;
  ASSERT_EQ(chunk.logprobs.size(), 1u);
  // Its row is {2, 1, 0}: greedy picks token 0.
  const double expected = 2.0 - std::log(std::exp(2.0) + std::exp(1.0) + 1.0);
  EXPECT_NEAR(chunk.logprobs[0], expected, 1e-6);
  EXPECT_TRUE(without->stream->Take().chunk.logprobs.empty());
}

TEST(OutputProcessorTest, SeededRowsDrawTheSameTokensAloneOrBatched) {
  generation::SamplingParams p;
  p.temperature = 1.0f;
  p.max_new_tokens = 64;
  p.seed = 7;
  torch::manual_seed(0);
  const torch::Tensor logits = torch::randn({1, 50});
  OutputProcessor output(nullptr, 1000, nullptr);
  auto alone = Seq(p);
  output.Attach(*alone);
  auto batched = Seq(p);
  auto other = Seq(p);
  other->request.sampling.seed = 8;
  output.Attach(*batched);
  output.Attach(*other);
  for (int i = 0; i < 20; ++i) {
    output.Emit({alone.get()}, {logits});
    output.Emit({other.get(), batched.get()}, {torch::cat({logits, logits})});
    EXPECT_EQ(alone->last_token, batched->last_token) << "step " << i;
  }
}

TEST(OutputProcessorTest, SlowReaderEndsWithResourceExhausted) {
  OutputProcessor output(nullptr, 100, nullptr);
  auto s = Seq(Greedy(), {1}, /*max_buffered=*/1);
  output.Attach(*s);
  EXPECT_EQ(output.Emit({s.get()}, {Peaks({1}, 4)}), 1);
  EXPECT_EQ(output.Emit({s.get()}, {Peaks({2}, 4)}), 0);  // nobody took the first
  EXPECT_EQ(s->finish, FinishReason::kError);
  EXPECT_EQ(s->status.code(), absl::StatusCode::kResourceExhausted);
}

TEST(OutputProcessorTest, FinishWritesTheSummary) {
  OutputProcessor output(nullptr, 100, nullptr);
  auto s = Seq(Greedy(1), {1, 2, 3});
  output.Attach(*s);
  output.Emit({s.get()}, {Peaks({1}, 4)});
  output.Finish(*s);
  RequestStream::Taken taken = s->stream->Take();
  ASSERT_TRUE(taken.summary.has_value());
  EXPECT_EQ(taken.summary->reason, FinishReason::kLength);
  EXPECT_EQ(taken.summary->prompt_tokens, 3);
  EXPECT_EQ(taken.summary->generated_tokens, 1);
  EXPECT_GE(taken.summary->total_seconds, taken.summary->time_to_first_token_seconds);
}

// With stream_messages_per_step, an Emit of n sequences asks each stream for
// messages of ceil(n / K) tokens: 5 sequences and K = 2 make messages of 3.
TEST(OutputProcessorTest, MessagesPerStepSetTheStreamsIntervalFromTheBatch) {
  OutputProcessor output(nullptr, /*max_seq_len=*/100, nullptr, /*stream_messages_per_step=*/2);
  std::vector<std::unique_ptr<ScheduledSequence>> owned;
  std::vector<ScheduledSequence*> batch;
  for (int i = 0; i < 5; ++i) {
    owned.push_back(Seq(Greedy(100)));
    output.Attach(*owned.back());
    batch.push_back(owned.back().get());
  }
  const torch::Tensor logits = Peaks({1, 1, 1, 1, 1}, 8);
  ASSERT_EQ(output.Emit(batch, {logits}), 5);
  for (ScheduledSequence* s : batch) EXPECT_EQ(s->stream->Take().chunk.token_ids.size(), 1u);
  for (int step = 0; step < 2; ++step) ASSERT_EQ(output.Emit(batch, {logits}), 5);
  for (ScheduledSequence* s : batch) EXPECT_TRUE(s->stream->Take().chunk.empty());
  ASSERT_EQ(output.Emit(batch, {logits}), 5);
  for (ScheduledSequence* s : batch) EXPECT_EQ(s->stream->Take().chunk.token_ids.size(), 3u);
  // One sequence alone: every token at once again.
  ASSERT_EQ(output.Emit({batch[0]}, {Peaks({1}, 8)}), 1);
  EXPECT_EQ(batch[0]->stream->Take().chunk.token_ids.size(), 1u);
}

}  // namespace
}  // namespace performer::server
