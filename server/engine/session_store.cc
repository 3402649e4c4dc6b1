#include "server/engine/session_store.h"

#include <openssl/evp.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/engine/state_signature.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;

constexpr char kSpillSuffix[] = ".pfstate";

absl::Time FileTime(const fs::path& path) {
  std::error_code error;
  const auto written = fs::last_write_time(path, error);
  if (error) return absl::Now();
  const auto since = written - fs::file_time_type::clock::now();
  return absl::Now() + absl::FromChrono(since);
}

// 64 hex digits: a spilled session's file name, and the key of the
// folder's and the remembered ids' tables. A digest keeps names within a
// file system's 255 bytes whatever the id, and a cryptographic one keeps a
// caller from crafting an id whose file is another caller's session.
std::string Sha256Hex(const std::string& id) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(id.data(), id.size(), digest, &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

constexpr size_t kSha256HexDigits = 64;

// Writes `bytes` to `path`, created or truncated; false when it could not.
bool WriteBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out.good();
}

}  // namespace

int64_t SessionState::bytes() const {
  return (state != nullptr ? state->bytes() : 0) +
         static_cast<int64_t>(tokens.size() * sizeof(int64_t));
}

SessionStore::SessionStore(SessionOptions options)
    : options_(std::move(options)),
      claim_suffix_(absl::StrFormat("%016x", absl::Uniform<uint64_t>(absl::BitGen()))) {
  if (options_.spill_dir.empty()) return;
  // Sessions a previous process (or another replica) left in the folder.
  std::error_code error;
  const fs::path folder = fs::path(options_.spill_dir) / options_.fingerprint.model;
  fs::create_directories(folder, error);
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!absl::EndsWith(name, kSpillSuffix)) continue;
    const std::string hex = name.substr(0, name.size() - std::strlen(kSpillSuffix));
    if (hex.size() != kSha256HexDigits ||
        absl::BytesToHexString(absl::HexStringToBytes(hex)) != hex) {
      continue;  // not one of ours
    }
    std::error_code size_error;
    const int64_t size = static_cast<int64_t>(fs::file_size(it->path(), size_error));
    if (size_error) continue;
    absl::MutexLock lock(&mu_);
    spilled_[hex] = {size, FileTime(it->path())};
    ++stats_.spilled_sessions;
    stats_.spilled_bytes += size;
  }
  if (options_.persist) writer_ = std::thread([this] { PersistLoop(); });
}

SessionStore::~SessionStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

std::string SessionStore::FileKey(const std::string& id) { return Sha256Hex(id); }

absl::StatusOr<std::string> SessionStore::Encode(const decoding::EncodedState& state) const {
  absl::StatusOr<std::string> bytes = decoding::EncodeState(options_.fingerprint, state);
  if (!bytes.ok()) return bytes.status();
  return SignState(options_.signing_key, *std::move(bytes));
}

absl::StatusOr<decoding::EncodedState> SessionStore::Decode(std::string_view bytes) const {
  absl::StatusOr<std::string_view> state = VerifyState(options_.signing_key, bytes);
  if (!state.ok()) return state.status();
  return decoding::DecodeState(*state, options_.fingerprint, options_.max_state_bytes);
}

std::string SessionStore::PathOf(const std::string& file_key) const {
  return (fs::path(options_.spill_dir) / options_.fingerprint.model / (file_key + kSpillSuffix))
      .string();
}

void SessionStore::AddBytesLocked(const Record& record, int64_t sign) {
  const int64_t bytes = record.content.bytes();
  stats_.sessions += sign;
  stats_.bytes += sign * bytes;
  if (record.owner.empty() || options_.max_bytes_per_caller <= 0) return;
  auto held = caller_bytes_.try_emplace(record.owner, 0).first;
  held->second += sign * bytes;
  if (held->second == 0) caller_bytes_.erase(held);
}

void SessionStore::Touch(Lru::iterator record, absl::Time now) {
  record->last_used = now;
  lru_.splice(lru_.begin(), lru_, record);
}

void SessionStore::ForgetLocked(const std::string& file_key) {
  if (dropped_.insert(file_key).second) dropped_order_.push_back(file_key);
  while (dropped_order_.size() > options_.remembered_ids) {
    dropped_.erase(dropped_order_.front());
    dropped_order_.pop_front();
  }
}

absl::StatusOr<std::optional<decoding::EncodedState>> SessionStore::ClaimFileLocked(
    const std::string& id, const std::string& path) {
  const std::string claimed = absl::StrCat(path, ".claimed.", claim_suffix_);
  std::error_code error;
  fs::rename(path, claimed, error);
  if (error == std::errc::no_such_file_or_directory) return std::nullopt;
  if (error) {
    return absl::InternalError(
        absl::StrCat("session ", id, ": cannot claim ", path, ": ", error.message()));
  }
  std::ifstream in(claimed, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<decoding::EncodedState> decoded =
      in.bad() || !in.is_open() ? absl::InternalError(absl::StrCat("cannot read ", path))
                                : Decode(bytes);
  std::error_code ignored;
  if (!decoded.ok()) {
    // One that cannot be taken (another model's, corrupted) stays where it is.
    fs::rename(claimed, path, ignored);
    return absl::Status(decoded.status().code(), absl::StrCat("session ", id, " in ", path, ": ",
                                                              decoded.status().message()));
  }
  fs::remove(claimed, ignored);
  return std::optional<decoding::EncodedState>(*std::move(decoded));
}

absl::StatusOr<SessionStore::Lru::iterator> SessionStore::FindLocked(const std::string& id,
                                                                     const std::string& owner,
                                                                     bool* loaded) {
  if (auto it = index_.find(id); it != index_.end()) return it->second;
  if (options_.spill_dir.empty()) return lru_.end();
  // Back from the folder: a file this store spilled, or one another replica
  // sharing the folder left there. The file is claimed, so that two
  // replicas do not both continue the session.
  const std::string file_key = FileKey(id);
  absl::StatusOr<std::optional<decoding::EncodedState>> claimed =
      ClaimFileLocked(id, PathOf(file_key));
  if (!claimed.ok()) return claimed.status();
  absl::Time last_used = absl::Now();
  if (auto spilled = spilled_.find(file_key); spilled != spilled_.end()) {
    // Indexed: its file is now taken, by this store or by another replica.
    last_used = spilled->second.second;
    stats_.spilled_bytes -= spilled->second.first;
    --stats_.spilled_sessions;
    spilled_.erase(spilled);
  }
  if (!claimed->has_value()) return lru_.end();
  Record record;
  record.id = id;
  record.owner = owner;
  record.content.state = std::make_shared<const StateSnapshot>(std::move((*claimed)->snapshot));
  record.content.tokens = std::move((*claimed)->tokens);
  record.last_used = last_used;
  lru_.push_front(std::move(record));
  index_[id] = lru_.begin();
  AddBytesLocked(lru_.front(), +1);
  if (loaded != nullptr) *loaded = true;
  return lru_.begin();
}

void SessionStore::EraseLocked(Lru::iterator record) {
  if (options_.persist) {
    std::error_code ignored;
    fs::remove(PathOf(FileKey(record->id)), ignored);
  }
  AddBytesLocked(*record, -1);
  index_.erase(record->id);
  lru_.erase(record);
}

void SessionStore::QueuePersistLocked(const std::string& id) {
  if (!writer_.joinable()) return;
  if (queued_.insert(id).second) to_persist_.push_back(id);
}

bool SessionStore::PersistWork() const { return stopping_ || !to_persist_.empty(); }

void SessionStore::PersistLoop() {
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(this, &SessionStore::PersistWork));
    if (stopping_) break;
    const std::string id = std::move(to_persist_.front());
    to_persist_.pop_front();
    queued_.erase(id);
    auto it = index_.find(id);
    if (it == index_.end() || it->second->content.state == nullptr) continue;
    const uint64_t version = it->second->version;
    const decoding::EncodedState content{*it->second->content.state, it->second->content.tokens};
    // The encoding and the write run outside the lock: the engine's thread
    // is never held up by the disk.
    mu_.Unlock();
    const std::string path = PathOf(FileKey(id));
    // A name of its own: WriteLocked (a spill, under the lock) may write
    // the same session meanwhile.
    const std::string temporary = absl::StrCat(path, ".persist.", claim_suffix_);
    const absl::StatusOr<std::string> bytes = Encode(content);
    const bool written = bytes.ok() && WriteBytes(temporary, *bytes);
    mu_.Lock();
    // Put in place only if the session is still here and unchanged: one
    // that moved, was deleted or was changed again (and queued again) must
    // not get this file.
    it = index_.find(id);
    std::error_code error;
    if (!written || it == index_.end() || it->second->version != version) {
      fs::remove(temporary, error);
      continue;
    }
    fs::rename(temporary, path, error);
    if (!error) ++stats_.persisted;
  }
  mu_.Unlock();
}

void SessionStore::ExpireLocked(absl::Time now) {
  const absl::Time cutoff = now - options_.ttl;
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->busy || it->last_used > cutoff) {
      ++it;
      continue;
    }
    ForgetLocked(FileKey(it->id));
    ++stats_.expired;
    EraseLocked(it++);
  }
  std::vector<std::string> idle;
  for (const auto& [file_key, file] : spilled_) {
    if (file.second <= cutoff) idle.push_back(file_key);
  }
  for (const std::string& file_key : idle) {
    DropSpilledFileLocked(file_key);
    ++stats_.expired;
    ForgetLocked(file_key);
  }
}

bool SessionStore::DropSpilledLocked(const std::string& id) {
  return DropSpilledFileLocked(FileKey(id));
}

bool SessionStore::DropSpilledFileLocked(const std::string& file_key) {
  auto spilled = spilled_.find(file_key);
  if (spilled == spilled_.end()) return false;
  std::error_code ignored;
  fs::remove(PathOf(file_key), ignored);
  stats_.spilled_bytes -= spilled->second.first;
  --stats_.spilled_sessions;
  spilled_.erase(spilled);
  return true;
}

absl::Status SessionStore::WriteLocked(const Record& record) {
  absl::StatusOr<std::string> bytes = Encode({*record.content.state, record.content.tokens});
  if (!bytes.ok()) return bytes.status();
  const std::string path = PathOf(FileKey(record.id));
  const std::string temporary = absl::StrCat(path, ".tmp.", claim_suffix_);
  if (!WriteBytes(temporary, *bytes)) {
    return absl::InternalError(absl::StrCat("cannot write session file ", temporary));
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error)
    return absl::InternalError(absl::StrCat("cannot rename ", temporary, ": ", error.message()));
  spilled_[FileKey(record.id)] = {static_cast<int64_t>(bytes->size()), record.last_used};
  ++stats_.spilled_sessions;
  stats_.spilled_bytes += static_cast<int64_t>(bytes->size());
  return absl::OkStatus();
}

void SessionStore::BalanceLocked() {
  while (stats_.bytes > options_.max_bytes) {
    // Least recently used first, skipping sessions with a request running.
    auto victim = lru_.end();
    for (auto r = lru_.rbegin(); r != lru_.rend(); ++r) {
      if (!r->busy && r->content.state != nullptr) {
        victim = std::prev(r.base());
        break;
      }
    }
    if (victim == lru_.end()) return;
    EvictLocked(victim);
  }
}

void SessionStore::EvictLocked(Lru::iterator victim) {
  const bool spilled = !options_.spill_dir.empty() && WriteLocked(*victim).ok();
  if (!spilled) {
    ForgetLocked(FileKey(victim->id));
    ++stats_.evicted;
  }
  AddBytesLocked(*victim, -1);
  index_.erase(victim->id);
  lru_.erase(victim);
}

absl::Status SessionStore::MakeRoomLocked(const std::string& owner, int64_t session_bytes,
                                          const Record* keep) {
  const int64_t share = options_.max_bytes_per_caller;
  if (owner.empty() || share <= 0) return absl::OkStatus();
  const auto held_it = caller_bytes_.find(owner);
  // The caller's other sessions in memory.
  int64_t held = (held_it != caller_bytes_.end() ? held_it->second : 0) -
                 (keep != nullptr ? keep->content.bytes() : 0);
  if (held + session_bytes <= share) return absl::OkStatus();
  const std::string of_share =
      absl::StrCat("caller ", owner, "'s share of the session memory (", share, " of ",
                   options_.max_bytes, " bytes, --caller_session_share)");
  if (session_bytes > share) {
    return absl::ResourceExhaustedError(
        absl::StrCat("takes ", session_bytes, " bytes, more than ", of_share));
  }
  // The caller's sessions that may leave: idle ones with a state (a new
  // one has no state yet, and is running).
  const auto evictable = [&](const Record& r) {
    return r.owner == owner && &r != keep && !r.busy && r.content.state != nullptr;
  };
  int64_t pinned = held;
  for (const Record& r : lru_) {
    if (evictable(r)) pinned -= r.content.bytes();
  }
  if (pinned + session_bytes > share) {
    return absl::ResourceExhaustedError(
        absl::StrCat("needs ", session_bytes, " bytes of ", of_share, ", and its sessions with a ",
                     "request running hold ", pinned, "; retry when they end"));
  }
  // Least recently used first; `next` stays valid when the one before it
  // is erased.
  for (auto next = lru_.end(); held + session_bytes > share && next != lru_.begin();) {
    const auto r = std::prev(next);
    if (!evictable(*r)) {
      next = r;
      continue;
    }
    held -= r->content.bytes();
    EvictLocked(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionState> SessionStore::Begin(const std::string& id, absl::Time now, bool create,
                                                 const std::string& owner) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  bool loaded = false;
  absl::StatusOr<Lru::iterator> found = FindLocked(id, owner, &loaded);
  if (!found.ok()) return found.status();
  Lru::iterator record = *found;
  if (record != lru_.end() && create) {
    return absl::AlreadyExistsError(
        "already exists: continue it without create_session, or delete it first");
  }
  if (loaded) {
    // Back from the folder, it comes into memory within its caller's share,
    // or goes back.
    if (absl::Status room = MakeRoomLocked(owner, record->content.bytes(), &*record); !room.ok()) {
      EvictLocked(record);
      return room;
    }
  }
  if (record == lru_.end()) {
    if (!create) {
      if (dropped_.count(FileKey(id)) > 0) {
        ++stats_.misses_expired;
        return absl::NotFoundError(
            "expired or was dropped to stay within the session memory; start it again with "
            "create_session (or import its exported state)");
      }
      ++stats_.misses_not_held;
      return absl::NotFoundError(
          "is not held by this replica (not in its memory, its spill folder or at its peers): "
          "it was never created, was deleted, or was lost with a replica that stopped without "
          "spilling it; start it again with create_session (or import its exported state)");
    }
    // Its turn fills it with a state: room for one is made now.
    if (absl::Status room = MakeRoomLocked(owner, options_.new_session_bytes, nullptr);
        !room.ok()) {
      return room;
    }
    dropped_.erase(FileKey(id));
    Record fresh;
    fresh.id = id;
    fresh.owner = owner;
    lru_.push_front(std::move(fresh));
    record = lru_.begin();
    index_[id] = record;
    AddBytesLocked(*record, +1);
  }
  if (record->busy) {
    return absl::FailedPreconditionError("has a request running; its turns run one at a time");
  }
  record->busy = true;
  Touch(record, now);
  return record->content;
}

bool SessionStore::Holds(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  return index_.count(id) > 0 || spilled_.count(FileKey(id)) > 0;
}

void SessionStore::CountPeerUnavailable() {
  absl::MutexLock lock(&mu_);
  ++stats_.misses_peer_unavailable;
}

void SessionStore::End(const std::string& id, std::optional<SessionState> updated, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return;
  Lru::iterator record = it->second;
  record->busy = false;
  if (updated.has_value()) {
    AddBytesLocked(*record, -1);
    record->content = std::move(*updated);
    ++record->version;
    AddBytesLocked(*record, +1);
    QueuePersistLocked(id);
  } else if (record->content.state == nullptr) {
    AddBytesLocked(*record, -1);
    index_.erase(it);
    lru_.erase(record);
    return;
  }
  Touch(record, now);
  // Its caller's older idle sessions make room for it; where they cannot,
  // the turn has run all the same, and the session leaves memory itself.
  if (!MakeRoomLocked(record->owner, record->content.bytes(), &*record).ok()) EvictLocked(record);
  BalanceLocked();
}

absl::Status SessionStore::Delete(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (DropSpilledLocked(id)) return absl::OkStatus();
  auto it = index_.find(id);
  if (it == index_.end() || it->second->content.state == nullptr) {
    return absl::NotFoundError(absl::StrCat("no session ", id));
  }
  if (it->second->busy) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", id, " has a request running; delete it when it ends"));
  }
  EraseLocked(it->second);
  return absl::OkStatus();
}

absl::StatusOr<SessionStore::Lru::iterator> SessionStore::FindHeldLocked(const std::string& id,
                                                                         absl::Time now,
                                                                         const std::string& owner,
                                                                         bool* loaded) {
  ExpireLocked(now);
  absl::StatusOr<Lru::iterator> found = FindLocked(id, owner, loaded);
  if (!found.ok()) return found.status();
  if (*found == lru_.end() || (*found)->content.state == nullptr) {
    return absl::NotFoundError(absl::StrCat("no session ", id));
  }
  return *found;
}

absl::StatusOr<ExportedSession> SessionStore::ExportLocked(const Record& record) const {
  const SessionState& content = record.content;
  absl::StatusOr<std::string> data = Encode({*content.state, content.tokens});
  if (!data.ok()) return data.status();
  return ExportedSession{*std::move(data), content.state->position,
                         static_cast<int64_t>(content.tokens.size())};
}

absl::StatusOr<ExportedSession> SessionStore::Take(const std::string& id, absl::Time now,
                                                   const std::string& owner) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Lru::iterator> found = FindHeldLocked(id, now, owner);
  if (!found.ok()) return found.status();
  if ((*found)->busy) {
    return absl::AbortedError(
        absl::StrCat("session ", id, " has a request running here; move it when it ends"));
  }
  absl::StatusOr<ExportedSession> moved = ExportLocked(**found);
  if (!moved.ok()) return moved.status();
  EraseLocked(*found);
  ++stats_.moved_out;
  return moved;
}

absl::StatusOr<ExportedSession> SessionStore::Export(const std::string& id, absl::Time now,
                                                     const std::string& owner) {
  absl::MutexLock lock(&mu_);
  bool loaded = false;
  absl::StatusOr<Lru::iterator> found = FindHeldLocked(id, now, owner, &loaded);
  if (!found.ok()) return found.status();
  Lru::iterator record = *found;
  Touch(record, now);
  absl::StatusOr<ExportedSession> exported = ExportLocked(*record);
  // Read back from the folder: it stays in memory where its caller's share
  // has room, and goes back otherwise (an export needs no memory).
  if (loaded && !MakeRoomLocked(owner, record->content.bytes(), &*record).ok()) {
    EvictLocked(record);
  }
  return exported;
}

absl::Status SessionStore::Import(const std::string& id, SessionState content, absl::Time now,
                                  bool moved_in, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  // A spilled file that cannot be read back is replaced as well.
  bool loaded = false;
  absl::StatusOr<Lru::iterator> found = FindLocked(id, owner, &loaded);
  Lru::iterator record = found.ok() ? *found : lru_.end();
  if (record != lru_.end() && record->busy) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", id, " has a request running; import when it ends"));
  }
  absl::Status room =
      MakeRoomLocked(owner, content.bytes(), record != lru_.end() ? &*record : nullptr);
  if (!room.ok()) {
    room = absl::Status(room.code(), absl::StrCat("session ", id, " ", room.message()));
    if (!moved_in) {
      // Not kept: the client has its bytes. What it would have replaced,
      // read back from the folder just now, goes back there.
      if (loaded) EvictLocked(record);
      return room;
    }
  }
  DropSpilledLocked(id);
  if (record == lru_.end()) {
    Record fresh;
    fresh.id = id;
    fresh.owner = owner;
    lru_.push_front(std::move(fresh));
    record = lru_.begin();
    index_[id] = record;
  } else {
    AddBytesLocked(*record, -1);
  }
  dropped_.erase(FileKey(id));
  record->content = std::move(content);
  ++record->version;
  AddBytesLocked(*record, +1);
  if (moved_in) ++stats_.moved_in;
  QueuePersistLocked(id);
  Touch(record, now);
  // Moved in from a peer, this store has its only copy: past the caller's
  // share it leaves memory the way the budget evicts.
  if (!room.ok()) EvictLocked(record);
  BalanceLocked();
  return room;
}

absl::Status SessionStore::SpillAll() {
  absl::MutexLock lock(&mu_);
  if (options_.spill_dir.empty()) return absl::OkStatus();
  absl::Status result;
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->content.state == nullptr) {
      ++it;
      continue;
    }
    if (absl::Status s = WriteLocked(*it); !s.ok()) {
      result.Update(s);
      ++it;
      continue;
    }
    AddBytesLocked(*it, -1);
    index_.erase(it->id);
    it = lru_.erase(it);
  }
  return result;
}

void SessionStore::Expire(absl::Time now) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
}

SessionStats SessionStore::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace performer::server
