// The settings and counters of the two ways an engine reuses recurrent
// states: the prefix-state cache (prefix_cache.h) and sessions
// (session_store.h). Plain values, so that the engine's header needs
// neither.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "core/decoding/model_fingerprint.h"

namespace performer::server {

// The server's prefix-cache budget per model unless --prefix_cache_bytes
// says otherwise (a library user's engine starts without a cache).
inline constexpr int64_t kServerPrefixCacheBytes = int64_t{256} << 20;

struct PrefixCacheOptions {
  int64_t max_bytes = 0;          // 0: off
  int64_t interval_tokens = 512;  // a multiple of the engine's prefill chunk
  // Keep the states on the model's device (max_bytes then counts device
  // memory): on a GPU a device copy per cached prompt instead of a transfer
  // to the host that waits for the device (docs/gpu.md#serving). false keeps
  // them in host memory. On a CPU the two are the same memory.
  bool on_device = true;
  // Whether callers share entries. false: each caller (the bearer token's
  // name, GenerationRequest::owner) has a cache of its own, so that a hit
  // (cached_prompt_tokens) cannot tell one caller whether another sent a
  // prompt. Without bearer tokens every caller is the same anonymous one.
  bool shared_across_callers = false;
};

struct PrefixCacheStats {
  int64_t queries = 0;        // lookups (requests that could use the cache)
  int64_t hits = 0;           // lookups that found a prefix
  int64_t cached_tokens = 0;  // prompt tokens served from cached states
  int64_t evictions = 0;
  int64_t entries = 0;
  int64_t bytes = 0;
};

struct SessionOptions {
  int64_t max_bytes = int64_t{256} << 20;  // in host memory; 0: sessions off
  absl::Duration ttl = absl::Hours(1);
  std::string spill_dir;  // "" = no disk tier; sessions go in spill_dir/<model>/
  decoding::ModelFingerprint fingerprint;
  int64_t max_state_bytes = int64_t{1} << 30;  // bound when reading a spilled file
  size_t remembered_ids = 10000;               // dropped ids that answer NOT_FOUND
  // Write each session to spill_dir after every turn (a writer thread, off
  // the engine's), so that a replica killed without a drain loses no
  // session: another replica sharing the folder takes it from there.
  bool persist = false;
  // The deployment's key for the states it writes and reads
  // (state_signature.h); empty = states are not signed.
  std::string signing_key;
  // Fairness between callers (a session's owner, a token's name): a named
  // caller's sessions hold at most this many of max_bytes in memory; past
  // it the caller's own least recently used idle sessions leave memory,
  // and a session that cannot fit is refused (session_store.h). The
  // anonymous caller ("": every client of a server without tokens) is not
  // bounded. 0 = no bound.
  int64_t max_bytes_per_caller = 0;
  // One session's state (the model's state bytes per sequence): room for it
  // in its caller's share is made when a session is created, so that a
  // state larger than the share is refused then, not dropped after its
  // first turn. 0: its room is made when its first turn ends.
  int64_t new_session_bytes = 0;
};

struct SessionStats {
  int64_t sessions = 0;  // in memory
  int64_t bytes = 0;     // in memory
  int64_t spilled_sessions = 0;
  int64_t spilled_bytes = 0;
  int64_t expired = 0;    // dropped for their TTL
  int64_t evicted = 0;    // dropped for the memory budget or a caller's share (no spill folder)
  int64_t moved_in = 0;   // taken from a peer replica (TakeSession)
  int64_t moved_out = 0;  // given to a peer replica
  int64_t persisted = 0;  // files written after a turn (SessionOptions::persist)
  // Turns naming a session this replica could not continue, by reason.
  int64_t misses_not_held = 0;          // not here, in the folder or at a peer
  int64_t misses_expired = 0;           // expired or dropped for the memory budget
  int64_t misses_peer_unavailable = 0;  // a peer holds it but could not hand it over
};

// A session's state as bytes (core/decoding/state_encoding.h).
struct ExportedSession {
  std::string data;
  int64_t position = 0;  // tokens the state has fed
  int64_t tokens = 0;    // tokens the session has seen
};

}  // namespace performer::server
