#include "server/engine/request_stream.h"

#include <gtest/gtest.h>

#include <vector>

namespace performer::server {
namespace {

StreamChunk Token(int32_t id) {
  StreamChunk chunk;
  chunk.token_ids.push_back(id);
  chunk.text = std::to_string(id) + " ";
  return chunk;
}

// Counts the listener's calls.
struct Notices {
  int count = 0;
  std::function<void()> Listener() {
    return [this] { ++count; };
  }
};

TEST(RequestStreamTest, EveryTokenIsDueByDefault) {
  RequestStream stream;
  Notices notices;
  stream.SetListener(notices.Listener());
  for (int32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream.Append(Token(i)));
    EXPECT_EQ(notices.count, i + 1);
    EXPECT_EQ(stream.Take().chunk.token_ids, std::vector<int32_t>({i}));
  }
}

TEST(RequestStreamTest, TheFirstTokenAtOnceThenMessagesOfTheInterval) {
  RequestStream stream(/*max_buffered_tokens=*/0, /*notify_every_tokens=*/4);
  Notices notices;
  stream.SetListener(notices.Listener());
  ASSERT_TRUE(stream.Append(Token(0)));
  EXPECT_EQ(notices.count, 1);
  EXPECT_EQ(stream.Take().chunk.token_ids, std::vector<int32_t>({0}));
  for (int32_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(stream.Append(Token(i)));
    EXPECT_EQ(notices.count, 1) << "token " << i;
    // A consumer that pumps on its own (after a write) takes nothing short.
    EXPECT_TRUE(stream.Take().chunk.empty());
  }
  ASSERT_TRUE(stream.Append(Token(4)));
  EXPECT_EQ(notices.count, 2);
  RequestStream::Taken taken = stream.Take();
  EXPECT_EQ(taken.chunk.token_ids, std::vector<int32_t>({1, 2, 3, 4}));
  EXPECT_EQ(taken.chunk.text, "1 2 3 4 ");
  EXPECT_FALSE(taken.summary.has_value());
  // The rest goes with the finish.
  ASSERT_TRUE(stream.Append(Token(5)));
  EXPECT_EQ(notices.count, 2);
  stream.Finish(StreamSummary{});
  EXPECT_EQ(notices.count, 3);
  taken = stream.Take();
  EXPECT_EQ(taken.chunk.token_ids, std::vector<int32_t>({5}));
  EXPECT_TRUE(taken.summary.has_value());
}

TEST(RequestStreamTest, AWholeAnswerIsHandedOverOnceAtTheFinish) {
  RequestStream stream(/*max_buffered_tokens=*/0, /*notify_every_tokens=*/0);
  Notices notices;
  stream.SetListener(notices.Listener());
  for (int32_t i = 0; i < 5; ++i) ASSERT_TRUE(stream.Append(Token(i)));
  EXPECT_EQ(notices.count, 0);
  EXPECT_TRUE(stream.Take().chunk.empty());
  stream.Finish(StreamSummary{});
  EXPECT_EQ(notices.count, 1);
  const RequestStream::Taken taken = stream.Take();
  EXPECT_EQ(taken.chunk.token_ids, std::vector<int32_t>({0, 1, 2, 3, 4}));
  EXPECT_TRUE(taken.summary.has_value());
}

TEST(RequestStreamTest, ALateListenerHearsOnlyOfWhatIsDue) {
  RequestStream stream(/*max_buffered_tokens=*/0, /*notify_every_tokens=*/3);
  ASSERT_TRUE(stream.Append(Token(0)));
  Notices first;
  stream.SetListener(first.Listener());
  EXPECT_EQ(first.count, 1);  // the first token waits
  ASSERT_EQ(stream.Take().chunk.token_ids.size(), 1u);
  ASSERT_TRUE(stream.Append(Token(1)));
  Notices second;
  stream.SetListener(second.Listener());
  EXPECT_EQ(second.count, 0);  // one of three
}

TEST(RequestStreamTest, TheSlowReaderBoundHoldsWithAnInterval) {
  RequestStream stream(/*max_buffered_tokens=*/4, /*notify_every_tokens=*/4);
  for (int32_t i = 0; i < 4; ++i) ASSERT_TRUE(stream.Append(Token(i)));
  EXPECT_FALSE(stream.Append(Token(4)));
  EXPECT_EQ(stream.Take().chunk.token_ids.size(), 4u);
  EXPECT_TRUE(stream.Append(Token(4)));
}

// The engine's load raises the interval from the append that says so on; the
// first token still goes at once, a lighter load lowers it again, and the
// raise stops at half the slow-reader bound.
TEST(RequestStreamTest, TheLoadRaisesTheIntervalUpToHalfTheBound) {
  RequestStream stream(/*max_buffered_tokens=*/8, /*notify_every_tokens=*/2);
  Notices notices;
  stream.SetListener(notices.Listener());
  ASSERT_TRUE(stream.Append(Token(0), /*load_tokens_per_message=*/3));
  EXPECT_EQ(notices.count, 1);
  EXPECT_EQ(stream.Take().chunk.token_ids, std::vector<int32_t>({0}));
  ASSERT_TRUE(stream.Append(Token(1), 3));
  ASSERT_TRUE(stream.Append(Token(2), 3));
  EXPECT_EQ(notices.count, 1);  // 2 wait: the stream's own interval, not the load's
  EXPECT_TRUE(stream.Take().chunk.empty());
  ASSERT_TRUE(stream.Append(Token(3), 3));
  EXPECT_EQ(notices.count, 2);
  EXPECT_EQ(stream.Take().chunk.token_ids, std::vector<int32_t>({1, 2, 3}));
  // Lighter: the stream's own interval of 2.
  ASSERT_TRUE(stream.Append(Token(4), 1));
  ASSERT_TRUE(stream.Append(Token(5), 1));
  EXPECT_EQ(notices.count, 3);
  EXPECT_EQ(stream.Take().chunk.token_ids, std::vector<int32_t>({4, 5}));
  // Far heavier: half the bound of 8.
  for (int32_t i = 6; i < 9; ++i) ASSERT_TRUE(stream.Append(Token(i), 100));
  EXPECT_EQ(notices.count, 3);
  ASSERT_TRUE(stream.Append(Token(9), 100));
  EXPECT_EQ(notices.count, 4);
  EXPECT_EQ(stream.Take().chunk.token_ids.size(), 4u);
}

}  // namespace
}  // namespace performer::server
