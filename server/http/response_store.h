// The Responses API's stored responses (store: true): each keeps the answer
// as sent and the session that holds its conversation's state, so that a
// next turn naming it (previous_response_id) prefills only its new input.
// A session's state is at its latest turn only: the response of that turn
// (the head) may be continued; an older one, already continued, may not
// (CONFLICT rather than a silently wrong conversation). Ids belong to their
// caller, as session ids do. At most `max_entries` responses are kept; past
// it the oldest go first.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace performer::server {

struct StoredResponse {
  std::string id;
  std::string owner;  // the caller (its token's name; "" without tokens)
  std::string model;
  std::string session_id;  // the engine session of the conversation
  std::string json;        // the response object as answered
  // Text the model generated past the answer and the session saw (a stop
  // string): the chat template's continuation skips it.
  std::string tail;
  std::string continued_by;  // the response that continued it; "" = the head
};

class ResponseStore {
 public:
  explicit ResponseStore(size_t max_entries) : max_entries_(max_entries) {}

  // Keeps `response` as its session's head; the response it continued
  // (`previous`, may be empty) is no longer one.
  void Put(StoredResponse response, const std::string& previous);
  // NOT_FOUND naming the id when the caller has no such response.
  absl::StatusOr<StoredResponse> Get(const std::string& id, const std::string& owner) const;
  // The response a next turn continues: NOT_FOUND as Get; ALREADY_EXISTS
  // (HTTP 409) naming the response that continued it already.
  absl::StatusOr<StoredResponse> Head(const std::string& id, const std::string& owner) const;
  // Removes it; returns what was removed (NOT_FOUND as Get).
  absl::StatusOr<StoredResponse> Delete(const std::string& id, const std::string& owner);
  size_t size() const;

 private:
  using Key = std::pair<std::string, std::string>;  // owner, id

  const size_t max_entries_;
  mutable absl::Mutex mu_;
  std::map<Key, StoredResponse> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<Key> order_ ABSL_GUARDED_BY(mu_);  // oldest first; may hold deleted keys
};

}  // namespace performer::server
