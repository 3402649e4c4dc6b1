// Sessions: a conversation's recurrent state kept between its requests, so
// that each turn prefills only its new tokens. A Performer sequence's whole
// past is one fixed-size state, so a session costs the model's state bytes
// (plus its token history) whatever its length.
//
// A session holds the state after every token it has fed and the tokens it
// has seen (prompts and generated tokens; the last generated token is seen
// but not yet fed: it is fed first by the next turn). One request at a time
// per session. A session exists once created (Begin with `create`, or
// Import); a turn of a session that is not held is refused.
// Tiers: a session's state is a host copy (StateSnapshot);
// idle sessions past the memory budget move to the spill folder (when one
// is set; otherwise the least recently used are dropped) and come back on
// use; sessions idle longer than the TTL are dropped from both. A dropped
// id is remembered (a bounded number of them) so that a turn of an expired
// session gets NOT_FOUND instead of silently starting over. SpillAll (at
// shutdown) writes every session to the folder, where this process after a
// restart, or another replica of the same model mounting it, picks them up:
// a session not found in memory or in the folder's index is looked up as a
// file too, and a file is claimed by renaming it, so that of two replicas
// sharing the folder exactly one takes it. With SessionOptions::persist a
// writer thread also writes each session after every turn.
//
// Callers: each session belongs to a caller (its owner, the bearer token's
// name; "" the anonymous caller of a server without tokens). With
// SessionOptions::max_bytes_per_caller a named caller's sessions hold at
// most that many bytes of memory, so that one caller's sessions (or its
// imports) cannot push everyone else's out: a session of that caller that
// comes into memory or grows (a create, a turn's end, an import, one back
// from the folder or a peer) first makes room by spilling or dropping that
// caller's own least recently used idle sessions, never another caller's.
// Where they cannot make room (the session alone is larger than the share,
// or the caller's other sessions in memory have requests running) the
// session is refused with RESOURCE_EXHAUSTED naming the share, or, at a
// turn's end (which cannot be refused), leaves memory itself. The
// anonymous caller is bounded by the memory budget alone.
//
// Thread-safe. Files are read and written under the store's lock (a
// session is a few MB at most), except the persist writer's.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
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
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  bool enabled() const { return options_.max_bytes > 0; }

  // Starts the persist writer where options.persist and a spill folder.
  explicit SessionStore(SessionOptions options);
  ~SessionStore();

  // A request of session `id` starts: its content (no state for a new
  // session). `create`: the request starts the session (ALREADY_EXISTS
  // where it is held); otherwise it continues it (NOT_FOUND where it is not
  // held, counted by reason, with a message that says whether it expired
  // or was dropped, or is not held here). FAILED_PRECONDITION while another
  // request of the session runs.
  // `owner`: the session's caller (see Callers above). RESOURCE_EXHAUSTED
  // where a new session (SessionOptions::new_session_bytes) or one back
  // from the folder does not fit the caller's share (it stays in the
  // folder).
  absl::StatusOr<SessionState> Begin(const std::string& id, absl::Time now, bool create,
                                     const std::string& owner = "");

  // Whether this store holds `id` in memory or in its folder's index (not
  // a file another replica left there: that is looked up after the peers,
  // which may hold the session itself).
  bool Holds(const std::string& id) const;
  // The request ended. `updated`: the session's content now; nullopt keeps
  // the content it had (the request failed, or ended before its prompt was
  // fed), and a new session without content is forgotten.
  void End(const std::string& id, std::optional<SessionState> updated, absl::Time now);

  // NOT_FOUND for an unknown id, FAILED_PRECONDITION while a request runs.
  absl::Status Delete(const std::string& id);
  // The session's bytes (state_encoding.h, signed: Encode). One read back
  // from the folder stays in memory where its caller's share has room.
  absl::StatusOr<ExportedSession> Export(const std::string& id, absl::Time now,
                                         const std::string& owner = "");
  // Creates or replaces `owner`'s session `id` (FAILED_PRECONDITION while a
  // request of it runs). RESOURCE_EXHAUSTED where it does not fit the
  // caller's share: an import is not kept; one `moved_in` (from a peer,
  // SessionStats::moved_in: this store has its only copy) is spilled to
  // the folder, or dropped without one, as the memory budget drops.
  absl::Status Import(const std::string& id, SessionState content, absl::Time now,
                      bool moved_in = false, const std::string& owner = "");
  // Moves session `id` out to a peer: its bytes, and this store forgets it
  // (memory, folder). NOT_FOUND where it is not held, ABORTED while a
  // request of it runs (the taker retries).
  absl::StatusOr<ExportedSession> Take(const std::string& id, absl::Time now,
                                       const std::string& owner = "");
  // A turn's session was held by a peer that could not hand it over.
  void CountPeerUnavailable();

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
    std::string owner;  // its caller; "" the anonymous one
    SessionState content;
    bool busy = false;
    absl::Time last_used;
    uint64_t version = 0;  // bumped by every change of `content`
  };
  using Lru = std::list<Record>;

  // A session's key in the spill folder and the remembered drops: the
  // SHA-256 of its id, in hex.
  static std::string FileKey(const std::string& id);
  // A state as the bytes this deployment writes (encoded, signed with
  // SessionOptions::signing_key), and back (signature checked, decoded).
  absl::StatusOr<std::string> Encode(const decoding::EncodedState& state) const;
  absl::StatusOr<decoding::EncodedState> Decode(std::string_view bytes) const;
  std::string PathOf(const std::string& file_key) const;
  // The record of `id`, loaded back from the spill folder if it is there
  // (as `owner`'s; then *loaded is set where given); end() if unknown.
  absl::StatusOr<Lru::iterator> FindLocked(const std::string& id, const std::string& owner,
                                           bool* loaded = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(Lru::iterator record, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Remembers it as dropped.
  void ForgetLocked(const std::string& file_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a spilled session's file; false if there is none.
  bool DropSpilledLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DropSpilledFileLocked(const std::string& file_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Renames the file at `path` to a name of this process's own, so that no
  // other replica can take it, and reads it: nullopt where it is gone (not
  // there, or another replica claimed it first). A file that cannot be
  // decoded is renamed back and its error returned.
  absl::StatusOr<std::optional<decoding::EncodedState>> ClaimFileLocked(const std::string& id,
                                                                        const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the expired sessions, then the record of `id` if it holds a
  // state (FindLocked); NOT_FOUND otherwise.
  absl::StatusOr<Lru::iterator> FindHeldLocked(const std::string& id, absl::Time now,
                                               const std::string& owner, bool* loaded = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Its bytes (Encode) with its position and token count.
  absl::StatusOr<ExportedSession> ExportLocked(const Record& record) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `id` from memory (and its persisted file).
  void EraseLocked(Lru::iterator record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `id` for the persist writer.
  void QueuePersistLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistLoop() ABSL_LOCKS_EXCLUDED(mu_);
  bool PersistWork() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Spills or drops idle sessions until memory is under the budget.
  void BalanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room in `owner`'s share of the memory (max_bytes_per_caller) for
  // one of its sessions of `session_bytes`; `keep`, where that session is
  // in memory already, counts as that size and stays. Spills or drops the
  // caller's other idle sessions, least recently used first, and no one
  // else's. RESOURCE_EXHAUSTED naming the share, with nothing evicted,
  // where they cannot make room. OK at once for the anonymous caller.
  absl::Status MakeRoomLocked(const std::string& owner, int64_t session_bytes, const Record* keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes an idle session out of memory: to the spill folder, or (without
  // one, or where the write fails) dropped and remembered as dropped.
  void EvictLocked(Lru::iterator victim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteLocked(const Record& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddBytesLocked(const Record& record, int64_t sign) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionOptions options_;
  // Random, per store: the suffix of the files it claims or writes, so that
  // replicas sharing the folder never write to the same temporary name.
  const std::string claim_suffix_;
  // The engine thread (Begin, End, Expire) and the session RPCs (Delete,
  // Export, Import) and a metrics scrape (Stats).
  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  std::unordered_map<std::string, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  // Bytes in memory of each named caller with sessions there, kept where
  // max_bytes_per_caller bounds them.
  std::unordered_map<std::string, int64_t> caller_bytes_ ABSL_GUARDED_BY(mu_);
  // Spilled sessions: FileKey(id) -> (file bytes, last use).
  std::unordered_map<std::string, std::pair<int64_t, absl::Time>> spilled_ ABSL_GUARDED_BY(mu_);
  // FileKey(id) of dropped sessions, oldest first in dropped_order_.
  std::unordered_set<std::string> dropped_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> dropped_order_ ABSL_GUARDED_BY(mu_);
  SessionStats stats_ ABSL_GUARDED_BY(mu_);
  // Persist writer: ids waiting (each once), and its thread.
  std::deque<std::string> to_persist_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

}  // namespace performer::server
