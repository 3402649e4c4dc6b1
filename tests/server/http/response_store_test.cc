#include "server/http/response_store.h"

#include <gtest/gtest.h>

#include <string>

namespace performer::server {
namespace {

StoredResponse Response(const std::string& id, const std::string& owner = "alice") {
  StoredResponse r;
  r.id = id;
  r.owner = owner;
  r.model = "m";
  r.session_id = "s-" + id;
  r.json = "{\"id\":\"" + id + "\"}";
  return r;
}

TEST(ResponseStoreTest, OnlyTheLatestTurnOfAConversationContinues) {
  ResponseStore store(10);
  store.Put(Response("r1"), "");
  ASSERT_TRUE(store.Head("r1", "alice").ok());
  store.Put(Response("r2"), "r1");
  EXPECT_TRUE(store.Head("r2", "alice").ok());
  const absl::StatusOr<StoredResponse> old = store.Head("r1", "alice");
  EXPECT_EQ(old.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(old.status().message().find("continued already by r2"), std::string::npos);
  EXPECT_EQ(old.status().message().rfind("previous_response_id: ", 0), 0u);
  // Still readable.
  ASSERT_TRUE(store.Get("r1", "alice").ok());
  EXPECT_EQ(store.Get("r1", "alice")->json, "{\"id\":\"r1\"}");
}

TEST(ResponseStoreTest, IdsBelongToTheirCaller) {
  ResponseStore store(10);
  store.Put(Response("r1", "alice"), "");
  EXPECT_EQ(store.Get("r1", "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Head("r1", "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Delete("r1", "bob").status().code(), absl::StatusCode::kNotFound);
  const absl::StatusOr<StoredResponse> removed = store.Delete("r1", "alice");
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->session_id, "s-r1");
  EXPECT_EQ(store.Get("r1", "alice").status().code(), absl::StatusCode::kNotFound);
}

TEST(ResponseStoreTest, TheOldestGoFirstPastTheBound) {
  ResponseStore store(3);
  for (int i = 0; i < 5; ++i) store.Put(Response("r" + std::to_string(i)), "");
  EXPECT_EQ(store.size(), 3u);
  EXPECT_FALSE(store.Get("r0", "alice").ok());
  EXPECT_FALSE(store.Get("r1", "alice").ok());
  EXPECT_TRUE(store.Get("r4", "alice").ok());
  // Deleting and adding many keeps the bookkeeping bounded.
  for (int i = 5; i < 500; ++i) {
    store.Put(Response("r" + std::to_string(i)), "");
    ASSERT_TRUE(store.Delete("r" + std::to_string(i), "alice").ok());
  }
  EXPECT_LE(store.size(), 3u);
}

}  // namespace
}  // namespace performer::server
