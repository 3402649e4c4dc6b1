// Sessions: a conversation's recurrent state kept between its requests, so
// that each turn prefills only its new tokens. A Performer sequence's whole
// past is one fixed-size state, so a session costs the model's state bytes
// (plus its token history) whatever its length.
//
// A session holds the state after every token it has fed and the tokens it
// has seen (prompts and generated tokens; the last generated token is seen
// but not yet fed: it is fed first by the next turn). One request at a time
// per session. Tiers: a session's state is a host copy (StateSnapshot);
// idle sessions past the memory budget move to the spill folder (when one
// is set; otherwise the least recently used are dropped) and come back on
// use; sessions idle longer than the TTL are dropped from both. A dropped
// id is remembered (a bounded number of them) so that a turn of an expired
// session gets NOT_FOUND instead of silently starting over. SpillAll (at
// shutdown) writes every session to the folder, where this process after a
// restart, or another replica of the same model mounting it, picks them up.
//
// Thread-safe. Files are read and written under the store's lock (a
// session is a few MB at most).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/decoding/sequence_decoder.h"  // StateSnapshot
#include "core/decoding/state_encoding.h"
#include "server/engine/state_reuse_options.h"

namespace performer::server {

// One session's content.
struct SessionState {
  std::shared_ptr<const StateSnapshot> state;  // null: a new session
  std::vector<int64_t> tokens;  // every token seen; tokens[state->position:] not fed yet
  int64_t bytes() const;
};

class SessionStore {
 public:
  explicit SessionStore(SessionOptions options);
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  bool enabled() const { return options_.max_bytes > 0; }

  // A request of session `id` starts: its content (no state for a new id).
  // FAILED_PRECONDITION while another request of the session runs;
  // NOT_FOUND for an id that expired or was dropped.
  absl::StatusOr<SessionState> Begin(const std::string& id, absl::Time now);
  // The request ended. `updated`: the session's content now; nullopt keeps
  // the content it had (the request failed, or ended before its prompt was
  // fed), and a new session without content is forgotten.
  void End(const std::string& id, std::optional<SessionState> updated, absl::Time now);

  // NOT_FOUND for an unknown id, FAILED_PRECONDITION while a request runs.
  absl::Status Delete(const std::string& id);
  // The session's bytes (state_encoding.h).
  absl::StatusOr<ExportedSession> Export(const std::string& id, absl::Time now);
  // Creates or replaces session `id` (FAILED_PRECONDITION while a request
  // of it runs).
  absl::Status Import(const std::string& id, SessionState content, absl::Time now);

  // Every session in memory to the spill folder (no-op without one).
  absl::Status SpillAll();
  // Drops the sessions idle longer than the TTL (their spilled files too).
  // Begin and Export do it first; the engine's thread also calls it, idle
  // or between rounds, so that Stats (a metrics scrape) never touches files.
  void Expire(absl::Time now);
  SessionStats Stats() const;

 private:
  struct Record {
    std::string id;
    SessionState content;
    bool busy = false;
    absl::Time last_used;
  };
  using Lru = std::list<Record>;

  // A session's key in the spill folder and the remembered drops: the
  // SHA-256 of its id, in hex.
  static std::string FileKey(const std::string& id);
  std::string PathOf(const std::string& file_key) const;
  // The record of `id`, loaded back from the spill folder if it is there;
  // end() if unknown.
  absl::StatusOr<Lru::iterator> FindLocked(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(Lru::iterator record, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Remembers it as dropped.
  void ForgetLocked(const std::string& file_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a spilled session's file; false if there is none.
  bool DropSpilledLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DropSpilledFileLocked(const std::string& file_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Spills or drops idle sessions until memory is under the budget.
  void BalanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteLocked(const Record& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddBytesLocked(const Record& record, int64_t sign) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionOptions options_;
  // The engine thread (Begin, End, Expire) and the session RPCs (Delete,
  // Export, Import) and a metrics scrape (Stats).
  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  std::unordered_map<std::string, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  // Spilled sessions: FileKey(id) -> (file bytes, last use).
  std::unordered_map<std::string, std::pair<int64_t, absl::Time>> spilled_ ABSL_GUARDED_BY(mu_);
  // FileKey(id) of dropped sessions, oldest first in dropped_order_.
  std::unordered_set<std::string> dropped_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> dropped_order_ ABSL_GUARDED_BY(mu_);
  SessionStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace performer::server
