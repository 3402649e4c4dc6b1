#include "server/service/write_threads.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/engine/request_stream.h"
#include "server/engine/thread_name.h"
#include "server/service/generation_rpc.h"

namespace performer::server {
namespace {

constexpr auto kTimeout = std::chrono::seconds(30);

// What the pumps saw, shared with them: they may outlive a failed test.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<std::thread::id> threads;
  std::vector<std::string> names;
  int pumps = 0;
};

TEST(WriteThreads, RunsEveryTaskOffThePostingThread) {
  auto seen = std::make_shared<Seen>();
  constexpr int kTasks = 100;
  for (int i = 0; i < kTasks; ++i) {
    WriteThreads::Get().Post([seen] {
      std::lock_guard<std::mutex> lock(seen->mu);
      seen->threads.push_back(std::this_thread::get_id());
      seen->names.push_back(ThisThreadName());
      seen->cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(seen->mu);
  ASSERT_TRUE(seen->cv.wait_for(lock, kTimeout, [&] { return seen->threads.size() == kTasks; }));
  for (const std::thread::id& id : seen->threads) EXPECT_NE(id, std::this_thread::get_id());
  for (const std::string& name : seen->names) EXPECT_EQ(name.rfind("write-", 0), 0u) << name;
  EXPECT_GE(WriteThreads::Get().threads(), 1);
  EXPECT_LE(WriteThreads::Get().threads(), 4);
}

TEST(WriteThreads, AReactorListenerPumpsOnTheWriteThreadsAndMissesNoAppend) {
  ReactorGuard guard;
  auto stream = std::make_shared<RequestStream>();
  auto seen = std::make_shared<Seen>();
  RequestStream* raw = stream.get();
  stream->SetListener(guard.Listener([raw, seen] {
    RequestStream::Taken taken = raw->Take();
    std::lock_guard<std::mutex> lock(seen->mu);
    ++seen->pumps;
    seen->threads.push_back(std::this_thread::get_id());
    seen->tokens.insert(seen->tokens.end(), taken.chunk.token_ids.begin(),
                        taken.chunk.token_ids.end());
    seen->cv.notify_all();
  }));
  constexpr int kTokens = 1000;
  {
    // With the reactor's lock held no pump can take anything: each write
    // thread holds at most one pump waiting for the lock (its post flag
    // already cleared) and the queue one more, whatever the number of
    // appends; without the flag there would be one pump per append.
    ReactorLock reactor(guard.mu());
    for (int i = 0; i < kTokens; ++i) {
      StreamChunk chunk;
      chunk.token_ids.push_back(i);
      ASSERT_TRUE(stream->Append(chunk));
    }
  }
  std::unique_lock<std::mutex> lock(seen->mu);
  ASSERT_TRUE(seen->cv.wait_for(lock, kTimeout, [&] { return seen->tokens.size() == kTokens; }));
  for (int i = 0; i < kTokens; ++i) EXPECT_EQ(seen->tokens[i], i);
  for (const std::thread::id& id : seen->threads) EXPECT_NE(id, std::this_thread::get_id());
  EXPECT_LE(seen->pumps, WriteThreads::Get().threads() + 1);
}

TEST(WriteThreads, ARetiredReactorIsNotPumped) {
  ReactorGuard guard;
  auto stream = std::make_shared<RequestStream>();
  auto seen = std::make_shared<Seen>();
  stream->SetListener(guard.Listener([seen] {
    std::lock_guard<std::mutex> lock(seen->mu);
    ++seen->pumps;
  }));
  guard.Retire();
  StreamChunk chunk;
  chunk.token_ids.push_back(1);
  ASSERT_TRUE(stream->Append(chunk));
  // Markers posted after the append, one per thread: with one write thread
  // (2 to 7 CPUs) the pump has run when they have; with more it may still
  // run, and must not call on_data either.
  auto marker = std::make_shared<Seen>();
  for (int i = 0; i < WriteThreads::Get().threads(); ++i) {
    WriteThreads::Get().Post([marker] {
      std::lock_guard<std::mutex> lock(marker->mu);
      ++marker->pumps;
      marker->cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(marker->mu);
    ASSERT_TRUE(marker->cv.wait_for(
        lock, kTimeout, [&] { return marker->pumps == WriteThreads::Get().threads(); }));
  }
  std::lock_guard<std::mutex> lock(seen->mu);
  EXPECT_EQ(seen->pumps, 0);
}

}  // namespace
}  // namespace performer::server
