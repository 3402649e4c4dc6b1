#include "server/server_config.h"

#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/engine/state_reuse_options.h"
#include "server/service/session_peers.h"

#ifndef PERFORMER_DEFAULT_MODEL_REPOSITORY
#define PERFORMER_DEFAULT_MODEL_REPOSITORY "models"
#endif

ABSL_FLAG(std::string, host, "0.0.0.0",
          "Address of the gRPC port (an IPv6 literal with or without brackets). All interfaces by "
          "default, as a container needs; on a "
          "shared host bind 127.0.0.1 or use TLS and tokens.");
ABSL_FLAG(int32_t, port, 50051, "gRPC port, 0 to 65535; 0 picks a free port (see --port_file).");
ABSL_FLAG(std::string, port_file, "",
          "Once every model is loaded and warmed up, write the bound port here.");
ABSL_FLAG(std::string, model_repository, PERFORMER_DEFAULT_MODEL_REPOSITORY,
          "Directory whose sub-folders (config.json + weights.safetensors) are the hosted "
          "models, each named after its folder.");
ABSL_FLAG(std::string, default_model, "",
          "Model used when a request names none (default: the first decoder by name).");
ABSL_FLAG(bool, skip_bad_models, false,
          "A model folder that fails to load (bad config, weights or tokenizer): false = refuse "
          "to start, naming it; true = log it, count it in performer_models_failed_to_load and "
          "serve the other models. With no loadable model the server never starts.");
ABSL_FLAG(int64_t, state_memory_bytes, int64_t{1} << 30,
          "Per model: recurrent-state memory; slots = this / state bytes per sequence.");
ABSL_FLAG(int64_t, model_memory_bytes, 0,
          "Per model, when positive: the bytes its weights (as --weight_dtype serves them) and "
          "its state pool take together; slots are also at most (this - weight bytes) / state "
          "bytes per sequence. 0 = no such bound.");
ABSL_FLAG(int64_t, max_batch, 64, "Per model: at most this many sequences decode together.");
ABSL_FLAG(int64_t, max_queue, 256,
          "Per model: requests that may wait for a slot; beyond it RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_new_tokens_limit, 4096, "Largest max_new_tokens a request may ask for.");
ABSL_FLAG(int64_t, max_request_id_bytes, 128,
          "Longest request_id a client may name (it is echoed in every streamed message).");
ABSL_FLAG(int64_t, max_stop_strings, 16, "Most stop_strings one request may give.");
ABSL_FLAG(int64_t, max_stop_string_bytes, 256, "Longest stop string, in bytes.");
ABSL_FLAG(int64_t, max_stop_token_ids, 256, "Most stop_token_ids one request may give.");
ABSL_FLAG(int64_t, max_prompt_bytes, int64_t{1} << 20,
          "Longest prompt_text / source_text / Embed text, in bytes (checked before tokenizing).");
ABSL_FLAG(int32_t, max_concurrent_streams, 256,
          "Most concurrent calls one client connection may have open (HTTP/2 "
          "SETTINGS_MAX_CONCURRENT_STREAMS); further calls wait for the client's own transport.");
ABSL_FLAG(int64_t, prefill_chunk_tokens, 512,
          "Prompt tokens prefilled per engine step in one forward: the chunk size and the "
          "per-step prefill budget (longer prompts continue chunk by chunk in later steps).");
ABSL_FLAG(int64_t, max_prefills_per_step, 4,
          "Prefill forwards per engine step (each passes over the weights once).");
ABSL_FLAG(int64_t, prefix_cache_bytes, performer::server::kServerPrefixCacheBytes,
          "Per model: memory for the prefix-state cache (the state after prompt prefixes, "
          "reused by later prompts that start the same way); 0 turns it off. Separate from "
          "--state_memory_bytes: a full cache evicts, it never refuses a request.");
ABSL_FLAG(bool, prefix_cache_on_device, true,
          "Keep the prefix-state cache in the model's device memory, which --prefix_cache_bytes "
          "then counts: on a GPU a device copy per cached prompt. false keeps it in host memory "
          "(on a GPU a transfer per prompt that waits for the device). On a CPU the same memory.");
ABSL_FLAG(bool, prefix_cache_shared_across_callers, false,
          "With --auth_tokens_file: whether callers (token names) share prefix-cache entries. "
          "false gives each caller a cache of its own, so that cached_prompt_tokens cannot tell "
          "one caller what another sent; true lets callers that trust each other share hits.");
ABSL_FLAG(int64_t, prefix_cache_interval_tokens, 0,
          "Inside long prompts, keep a prefix state every this many tokens (a multiple of "
          "--prefill_chunk_tokens; 0 = the chunk size). Prompt ends are always kept.");
ABSL_FLAG(int64_t, session_bytes, int64_t{256} << 20,
          "Per model: host memory for idle sessions (GenerateRequest.session_id); past it the "
          "least recently used move to --state_spill_dir, or are dropped without one. 0 turns "
          "sessions off.");
ABSL_FLAG(int64_t, session_ttl_seconds, 3600,
          "Sessions idle this long are dropped (from memory and the spill folder).");
ABSL_FLAG(std::string, state_spill_dir, "",
          "Folder for sessions that leave memory (one subfolder per model): idle ones past "
          "--session_bytes, and all of them at shutdown, so that a restarted server or another "
          "replica mounting the folder continues them. Empty = none.");
ABSL_FLAG(double, caller_slot_share, 0.75,
          "With --auth_tokens_file: the share of a model's slots one caller (token name) may "
          "hold at once, (0, 1]; its other requests wait while other callers' are admitted. "
          "1 = no bound.");
ABSL_FLAG(double, caller_queue_share, 0.5,
          "With --auth_tokens_file: the share of --max_queue one caller may have waiting beyond "
          "its slots, (0, 1]; beyond it RESOURCE_EXHAUSTED. 1 = no bound.");
ABSL_FLAG(double, caller_session_share, 0.5,
          "With --auth_tokens_file: the share of --session_bytes one caller's sessions may hold "
          "in memory, (0, 1]; past it that caller's own least recently used idle sessions move "
          "to --state_spill_dir (or are dropped without one), never another caller's, and a "
          "session that cannot fit gets RESOURCE_EXHAUSTED. 1 = no bound.");
ABSL_FLAG(bool, session_persist, false,
          "Write each session to --state_spill_dir after every turn (a writer thread, off the "
          "decode loop), so that a replica killed without a drain (SIGKILL, a lost node) loses no "
          "session: another replica sharing the folder continues it.");
ABSL_FLAG(std::vector<std::string>, session_peers, {},
          "Peer replicas a session not held here is moved from (TakeSession), comma-separated: "
          "host:port, or dns:///name:port for every address of a name (a Kubernetes headless "
          "Service). This replica's own address is left out. Empty = sessions do not move in.");
ABSL_FLAG(std::string, session_peer_token_file, "",
          "File holding the bearer token presented to peers (one token, in the token file's "
          "syntax); where they check tokens, it needs the \"peer\" permission.");
ABSL_FLAG(std::string, session_peer_ca_file, "",
          "PEM roots of the peers' certificates: peers are called over TLS (presenting "
          "--tls_cert_file, for mutual TLS, when set). Empty = plaintext.");
ABSL_FLAG(absl::Duration, session_peer_timeout, absl::Seconds(2),
          "How long one peer may take to hand over a session.");
ABSL_FLAG(int64_t, stream_buffer_tokens, 1024,
          "Generated tokens a streaming client may fall behind before its stream is ended "
          "with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, stream_interval, 1,
          "Tokens per streamed message (gRPC streams and Server-Sent Events): a request's first "
          "token goes out at once, later ones once this many wait, and the rest at the end. "
          "Larger: fewer, bigger messages, for many streams on few CPUs (docs/serving.md). 1 to "
          "--stream_buffer_tokens.");
ABSL_FLAG(int64_t, stream_messages_per_step, 0,
          "With many streams, about this many streamed messages per decode step: a step of n "
          "sequences sends each in messages of at least n / this tokens (and at least "
          "--stream_interval), so that few streams get every token at once and many share the "
          "message path (docs/serving.md). 0 = off: --stream_interval alone.");
ABSL_FLAG(int32_t, io_thread_nice, 0,
          "Added to the nice value of every thread but the model's compute threads (the gRPC, "
          "HTTP, write and metrics threads): where one CPU runs both, the model's step is not "
          "preempted by message handling and tokens leave in fewer, larger messages "
          "(docs/serving.md). 0 to 19; 0 = the same priority.");
ABSL_FLAG(int64_t, max_message_bytes, 4 << 20,
          "Largest gRPC message received or sent, 1 to 2147483647 bytes.");
ABSL_FLAG(std::string, device, "cpu",
          "Where models run: cpu, or cuda[:N] with a CUDA LibTorch (docs/gpu.md).");
ABSL_FLAG(std::string, weight_dtype, "fp32",
          "Dtype the models' projection, feed-forward and output-head weights are served in, "
          "prefill and decode: fp32, bf16 or int8 (CPU only; docs/serving.md).");
ABSL_FLAG(int32_t, intra_op_threads, 0, "LibTorch intra-op threads (0 = one per online CPU).");
ABSL_FLAG(bool, cuda_same_bits, false,
          "With --device=cuda: every kernel computes a row the same way whatever the batch, and "
          "prompts run token by token, so that a request's logits are the same bits however it "
          "is fed (prompt chunks, prefix cache, sessions, batch), as on the CPU always; a "
          "prompt's attention then runs token by token in each layer (docs/serving.md).");
ABSL_FLAG(int32_t, grpc_max_threads, 0, "Cap on gRPC's threads (0 = gRPC's default).");
ABSL_FLAG(int32_t, keepalive_time_ms, 60000, "Server keepalive ping interval.");
ABSL_FLAG(int32_t, keepalive_timeout_ms, 20000, "Keepalive ping ack timeout.");
ABSL_FLAG(int32_t, keepalive_min_client_ping_ms, 10000,
          "Shortest client ping interval accepted (pings without calls are allowed).");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM, how long running requests may take to finish.");
ABSL_FLAG(int32_t, metrics_port, 9464,
          "Prometheus metrics port (/metrics on --metrics_host); 0 picks a free port (see "
          "--metrics_port_file); -1 turns the exposer off.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address of the metrics endpoint. Loopback by default: metrics say what the server "
          "hosts and how busy it is. 0.0.0.0 for a Prometheus elsewhere (with "
          "--metrics_auth_token_file).");
ABSL_FLAG(std::string, metrics_auth_token_file, "",
          "File holding one token (the --auth_tokens_file syntax): /metrics then needs HTTP "
          "basic auth with it as the password, any user name (prometheus-cpp's endpoint "
          "supports no other scheme). Re-read on SIGHUP and on change.");
ABSL_FLAG(std::string, metrics_port_file, "", "Once ready, write the bound metrics port here.");
ABSL_FLAG(std::string, request_seconds_buckets, "",
          "Histogram bounds (seconds, comma-separated) for request duration, queue time and "
          "time to first token; empty = 0.5 ms .. 600 s.");
ABSL_FLAG(std::string, token_seconds_buckets, "",
          "Histogram bounds (seconds) for inter-token latency, prefill and engine steps; empty = "
          "0.1 ms .. 5 s.");
ABSL_FLAG(std::string, token_count_buckets, "",
          "Histogram bounds for prompt / generated tokens per request; empty = 1 .. 16384.");
ABSL_FLAG(std::string, batch_size_buckets, "",
          "Histogram bounds for the batch size and tokens per step; empty = 1 .. 512.");
ABSL_FLAG(double, liveness_stall_seconds, 30,
          "An engine with work that completes no step for this long, or a gRPC listener that "
          "leaves connections waiting this long, is stuck: every health name, liveness "
          "included, turns NOT_SERVING.");
ABSL_FLAG(std::string, log_format, "plain",
          "Log lines on stderr: \"plain\" for people or \"json\" (one object per line).");
ABSL_FLAG(std::string, log_level, "info",
          "Lowest severity logged: trace, debug, info, warn, error or off. Requests are logged "
          "at info (OK, CANCELLED, DEADLINE_EXCEEDED), warn (refused) or error (server faults).");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain (the server's first): with --tls_key_file the gRPC port "
          "speaks TLS only. Re-read when it changes (--credentials_reload_seconds).");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle for mutual TLS: a client without a certificate issued by one of "
          "these CAs is refused at the handshake. Needs --tls_cert_file.");
ABSL_FLAG(std::string, state_signing_key_file, "",
          "File holding this deployment's key (at least 32 bytes; the same on every replica) "
          "for HMAC-SHA256 signatures on exported and spilled session states: only states that "
          "carry a valid one are imported, taken or read back. Empty = states are not signed.");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Bearer tokens, one per line: <token> [<name> [<permission>,...]] (permissions: "
          "priority, cancel_any, peer, admin; docs/serving.md#security). Every call but "
          "grpc.health.v1.Health then needs \"authorization: Bearer <token>\", else "
          "UNAUTHENTICATED. Re-read on SIGHUP and on change.");
ABSL_FLAG(int32_t, max_priority_unprivileged, 0,
          "Highest request priority a caller may ask for without the \"priority\" token "
          "permission; above it PERMISSION_DENIED. Without --auth_tokens_file no caller has "
          "the permission.");
ABSL_FLAG(bool, reflection, false,
          "Serve gRPC server reflection (grpc.reflection.v1alpha) on the gRPC port; with "
          "--auth_tokens_file it needs a token too.");
ABSL_FLAG(int32_t, health_port, -1,
          "A second, plaintext port on --host serving only grpc.health.v1.Health (every other "
          "call PERMISSION_DENIED), for probes that cannot speak TLS such as the kubelet's "
          "gRPC probe; -1 = none.");
ABSL_FLAG(int32_t, http_port, -1,
          "HTTP port on --host serving the OpenAI-compatible API (docs/http.md); 0 picks a free "
          "port (see --http_port_file), -1 = no HTTP listener.");
ABSL_FLAG(std::string, http_port_file, "",
          "Once serving, write the bound HTTP port here (after --port_file's port is known, "
          "before --port_file is written).");
ABSL_FLAG(int32_t, http_threads, 2,
          "Threads of the HTTP listener; each serves any number of connections.");
ABSL_FLAG(int64_t, http_max_connections, 10000,
          "Open HTTP connections at most; one more is answered 503 and closed.");
ABSL_FLAG(int32_t, credentials_reload_seconds, 10,
          "How often the token files and the TLS files are checked for changes and re-read "
          "(at least 1). SIGHUP re-reads the token files at once.");
ABSL_FLAG(int64_t, test_stall_engine_after_steps, 0,
          "TEST HOOK: every engine blocks after this many decode steps (0 = never).");
ABSL_FLAG(int32_t, test_load_delay_ms, 0,
          "TEST HOOK: sleep this long before loading each model folder.");
ABSL_FLAG(int32_t, step_delay_ms, 0,
          "TEST HOOK: sleep this long in every engine step (keeps requests running in tests).");

namespace performer::server {
namespace {

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

// A TCP port flag: 0 to 65535, or -1 where the flag may turn its listener
// off.
absl::Status CheckPort(absl::string_view flag, int64_t port, bool may_be_off) {
  if ((port >= 0 && port <= 65535) || (may_be_off && port == -1)) return absl::OkStatus();
  return Invalid(absl::StrCat("--", flag, " must be 0 (a free port) to 65535",
                              may_be_off ? ", or -1 for none" : "", ", got ", port));
}

absl::Status CheckAtLeast(absl::string_view flag, int64_t value, int64_t least) {
  if (value >= least) return absl::OkStatus();
  return Invalid(absl::StrCat("--", flag, " must be at least ", least, ", got ", value));
}

absl::Status CheckRequestBounds(const RequestBounds& bounds) {
  for (auto [flag, value, least] :
       {std::make_tuple("max_new_tokens_limit", bounds.max_new_tokens, int64_t{1}),
        std::make_tuple("max_request_id_bytes", bounds.max_request_id_bytes, int64_t{1}),
        std::make_tuple("max_stop_strings", bounds.max_stop_strings, int64_t{0}),
        std::make_tuple("max_stop_string_bytes", bounds.max_stop_string_bytes, int64_t{1}),
        std::make_tuple("max_stop_token_ids", bounds.max_stop_token_ids, int64_t{0}),
        std::make_tuple("max_prompt_bytes", bounds.max_prompt_bytes, int64_t{1})}) {
    if (absl::Status s = CheckAtLeast(flag, value, least); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckEngine(const RepositoryOptions& repository) {
  const EngineOptions& engine = repository.engine;
  for (auto [flag, value, least] :
       {std::make_tuple("max_batch", repository.max_batch, int64_t{1}),
        std::make_tuple("state_memory_bytes", repository.state_memory_bytes, int64_t{1}),
        std::make_tuple("model_memory_bytes", repository.model_memory_bytes, int64_t{0}),
        std::make_tuple("max_queue", engine.max_queue, int64_t{0}),
        std::make_tuple("prefill_chunk_tokens", engine.prefill_chunk_tokens, int64_t{1}),
        std::make_tuple("max_prefills_per_step", engine.max_prefills_per_step, int64_t{1}),
        std::make_tuple("stream_messages_per_step", engine.stream_messages_per_step, int64_t{0}),
        std::make_tuple("prefix_cache_bytes", engine.prefix_cache.max_bytes, int64_t{0}),
        std::make_tuple("session_bytes", engine.sessions.max_bytes, int64_t{0})}) {
    if (absl::Status s = CheckAtLeast(flag, value, least); !s.ok()) return s;
  }
  if (engine.sessions.ttl < absl::Seconds(1)) {
    return Invalid("--session_ttl_seconds must be at least 1");
  }
  for (auto [flag, share] : {std::make_pair("caller_slot_share", engine.caller_slot_share),
                             std::make_pair("caller_queue_share", engine.caller_queue_share),
                             std::make_pair("caller_session_share", engine.caller_session_share)}) {
    if (!(share > 0.0 && share <= 1.0)) {
      return Invalid(absl::StrCat("--", flag, " must be in (0, 1], got ", share));
    }
  }
  if (engine.sessions.persist && engine.sessions.spill_dir.empty()) {
    return Invalid("--session_persist needs --state_spill_dir, the folder it writes to");
  }
  // A cached prefix must end where a cold prefill ends a chunk, so that
  // resuming from it gives the same tokens.
  if (engine.prefix_cache.interval_tokens < 1 ||
      engine.prefix_cache.interval_tokens % engine.prefill_chunk_tokens != 0) {
    return Invalid(absl::StrCat(
        "--prefix_cache_interval_tokens must be a positive multiple of --prefill_chunk_tokens (",
        engine.prefill_chunk_tokens, "), got ", engine.prefix_cache.interval_tokens,
        ": a cached prefix must end where a cold prefill ends a chunk, so that resuming from it "
        "gives the same tokens"));
  }
  return CheckRequestBounds(engine.request_bounds);
}

absl::Status CheckGrpc(const GrpcConfig& grpc) {
  if (absl::Status s = CheckPort("port", grpc.port, /*may_be_off=*/false); !s.ok()) return s;
  if (absl::Status s = CheckPort("health_port", grpc.health_port, /*may_be_off=*/true); !s.ok()) {
    return s;
  }
  if (grpc.host.empty()) return Invalid("--host must name an address");
  // gRPC takes message sizes and stream counts as int: a larger value would
  // wrap (4294967296 becomes 0 and refuses every message).
  if (grpc.max_message_bytes < 1 || grpc.max_message_bytes > std::numeric_limits<int32_t>::max()) {
    return Invalid(absl::StrCat("--max_message_bytes must be 1 to ",
                                std::numeric_limits<int32_t>::max(), ", got ",
                                grpc.max_message_bytes));
  }
  for (auto [flag, value, least] :
       {std::make_tuple("max_concurrent_streams", grpc.max_concurrent_streams, 1),
        std::make_tuple("grpc_max_threads", grpc.max_threads, 0),
        std::make_tuple("keepalive_time_ms", grpc.keepalive_time_ms, 1),
        std::make_tuple("keepalive_timeout_ms", grpc.keepalive_timeout_ms, 1),
        std::make_tuple("keepalive_min_client_ping_ms", grpc.keepalive_min_client_ping_ms, 0)}) {
    if (absl::Status s = CheckAtLeast(flag, value, least); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckHttp(const HttpConfig& http) {
  if (absl::Status s = CheckPort("http_port", http.port, /*may_be_off=*/true); !s.ok()) return s;
  if (http.threads < 1 || http.threads > 64) {
    return Invalid(absl::StrCat("--http_threads must be 1 to 64, got ", http.threads));
  }
  return CheckAtLeast("http_max_connections", http.max_connections, int64_t{1});
}

absl::Status CheckSecurity(const SecurityConfig& security) {
  if (absl::Status s =
          CheckAtLeast("credentials_reload_seconds", security.credentials_reload_seconds, 1);
      !s.ok()) {
    return s;
  }
  if (security.tls.cert_file.empty() != security.tls.key_file.empty()) {
    return Invalid("--tls_cert_file and --tls_key_file go together");
  }
  if (!security.tls_on() && !security.tls.client_ca_file.empty()) {
    return Invalid("--tls_client_ca_file needs --tls_cert_file and --tls_key_file");
  }
  return absl::OkStatus();
}

// A histogram's bounds flag: empty keeps `target` (the default).
absl::Status ReadBuckets(const absl::Flag<std::string>& flag, const char* name,
                         std::vector<double>* target) {
  const std::string text = absl::GetFlag(flag);
  if (text.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<double>> parsed = ParseBuckets(text, name);
  if (!parsed.ok()) return parsed.status();
  *target = *std::move(parsed);
  return absl::OkStatus();
}

RepositoryOptions RepositoryFromFlags() {
  RepositoryOptions options;
  options.state_memory_bytes = absl::GetFlag(FLAGS_state_memory_bytes);
  options.model_memory_bytes = absl::GetFlag(FLAGS_model_memory_bytes);
  options.max_batch = absl::GetFlag(FLAGS_max_batch);
  options.skip_bad_models = absl::GetFlag(FLAGS_skip_bad_models);
  options.test_load_delay = absl::Milliseconds(absl::GetFlag(FLAGS_test_load_delay_ms));
  options.device = absl::GetFlag(FLAGS_device);
  EngineOptions& engine = options.engine;
  engine.max_queue = absl::GetFlag(FLAGS_max_queue);
  engine.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  engine.max_prefills_per_step = absl::GetFlag(FLAGS_max_prefills_per_step);
  engine.stream_messages_per_step = absl::GetFlag(FLAGS_stream_messages_per_step);
  engine.caller_slot_share = absl::GetFlag(FLAGS_caller_slot_share);
  engine.caller_queue_share = absl::GetFlag(FLAGS_caller_queue_share);
  engine.caller_session_share = absl::GetFlag(FLAGS_caller_session_share);
  engine.step_delay = absl::Milliseconds(absl::GetFlag(FLAGS_step_delay_ms));
  engine.stall_after_steps = absl::GetFlag(FLAGS_test_stall_engine_after_steps);
  RequestBounds& bounds = engine.request_bounds;
  bounds.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens_limit);
  bounds.max_request_id_bytes = absl::GetFlag(FLAGS_max_request_id_bytes);
  bounds.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  bounds.max_stop_string_bytes = absl::GetFlag(FLAGS_max_stop_string_bytes);
  bounds.max_stop_token_ids = absl::GetFlag(FLAGS_max_stop_token_ids);
  bounds.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  engine.prefix_cache.max_bytes = absl::GetFlag(FLAGS_prefix_cache_bytes);
  engine.prefix_cache.on_device = absl::GetFlag(FLAGS_prefix_cache_on_device);
  engine.prefix_cache.shared_across_callers =
      absl::GetFlag(FLAGS_prefix_cache_shared_across_callers);
  const int64_t interval = absl::GetFlag(FLAGS_prefix_cache_interval_tokens);
  engine.prefix_cache.interval_tokens = interval == 0 ? engine.prefill_chunk_tokens : interval;
  engine.sessions.max_bytes = absl::GetFlag(FLAGS_session_bytes);
  engine.sessions.ttl = absl::Seconds(absl::GetFlag(FLAGS_session_ttl_seconds));
  engine.sessions.spill_dir = absl::GetFlag(FLAGS_state_spill_dir);
  engine.sessions.persist = absl::GetFlag(FLAGS_session_persist);
  return options;
}

GrpcConfig GrpcFromFlags() {
  GrpcConfig grpc;
  grpc.host = absl::GetFlag(FLAGS_host);
  grpc.port = absl::GetFlag(FLAGS_port);
  grpc.port_file = absl::GetFlag(FLAGS_port_file);
  grpc.health_port = absl::GetFlag(FLAGS_health_port);
  grpc.reflection = absl::GetFlag(FLAGS_reflection);
  grpc.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  grpc.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  grpc.max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  grpc.keepalive_time_ms = absl::GetFlag(FLAGS_keepalive_time_ms);
  grpc.keepalive_timeout_ms = absl::GetFlag(FLAGS_keepalive_timeout_ms);
  grpc.keepalive_min_client_ping_ms = absl::GetFlag(FLAGS_keepalive_min_client_ping_ms);
  return grpc;
}

HttpConfig HttpFromFlags() {
  HttpConfig http;
  http.port = absl::GetFlag(FLAGS_http_port);
  http.port_file = absl::GetFlag(FLAGS_http_port_file);
  http.threads = absl::GetFlag(FLAGS_http_threads);
  http.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  return http;
}

absl::StatusOr<MetricsConfig> MetricsFromFlags() {
  MetricsConfig metrics;
  metrics.host = absl::GetFlag(FLAGS_metrics_host);
  metrics.port = absl::GetFlag(FLAGS_metrics_port);
  metrics.port_file = absl::GetFlag(FLAGS_metrics_port_file);
  metrics.auth_token_file = absl::GetFlag(FLAGS_metrics_auth_token_file);
  MetricBuckets& buckets = metrics.buckets;
  for (auto [flag, name, target] :
       {std::make_tuple(&FLAGS_request_seconds_buckets, "request_seconds_buckets",
                        &buckets.request_seconds),
        std::make_tuple(&FLAGS_token_seconds_buckets, "token_seconds_buckets",
                        &buckets.token_seconds),
        std::make_tuple(&FLAGS_token_count_buckets, "token_count_buckets", &buckets.token_counts),
        std::make_tuple(&FLAGS_batch_size_buckets, "batch_size_buckets", &buckets.batch_sizes)}) {
    if (absl::Status s = ReadBuckets(*flag, name, target); !s.ok()) return s;
  }
  return metrics;
}

SecurityConfig SecurityFromFlags() {
  SecurityConfig security;
  security.tls = TlsFiles{absl::GetFlag(FLAGS_tls_cert_file), absl::GetFlag(FLAGS_tls_key_file),
                          absl::GetFlag(FLAGS_tls_client_ca_file)};
  security.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  security.state_signing_key_file = absl::GetFlag(FLAGS_state_signing_key_file);
  security.max_priority_unprivileged = absl::GetFlag(FLAGS_max_priority_unprivileged);
  security.credentials_reload_seconds = absl::GetFlag(FLAGS_credentials_reload_seconds);
  return security;
}

absl::Status CheckSessionPeers(const SessionPeerConfig& peers) {
  for (const std::string& entry : peers.peers) {
    if (absl::Status s = ValidatePeerEntry(entry); !s.ok()) return s;
  }
  if (peers.timeout <= absl::ZeroDuration()) {
    return Invalid("--session_peer_timeout must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

std::string GrpcConfig::Address(int32_t port_number) const {
  const bool ipv6_literal = absl::StrContains(host, ':') && !absl::StartsWith(host, "[");
  return ipv6_literal ? absl::StrCat("[", host, "]:", port_number)
                      : absl::StrCat(host, ":", port_number);
}

LogConfig LogConfigFromFlags() {
  return LogConfig{absl::GetFlag(FLAGS_log_format), absl::GetFlag(FLAGS_log_level)};
}

absl::Status ValidateServerConfig(const ServerConfig& config) {
  if (absl::Status s = CheckServingDevice(config.repository.device); !s.ok()) return s;
  if (absl::Status s = CheckEngine(config.repository); !s.ok()) return s;
  if (absl::Status s = CheckGrpc(config.grpc); !s.ok()) return s;
  if (absl::Status s = CheckHttp(config.http); !s.ok()) return s;
  if (absl::Status s = CheckPort("metrics_port", config.metrics.port, /*may_be_off=*/true);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckSecurity(config.security); !s.ok()) return s;
  if (absl::Status s = CheckSessionPeers(config.session_peers); !s.ok()) return s;
  if (absl::Status s = CheckAtLeast("stream_buffer_tokens", config.stream_buffer_tokens, 1);
      !s.ok()) {
    return s;
  }
  if (config.io_thread_nice < 0 || config.io_thread_nice > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("--io_thread_nice=", config.io_thread_nice, " is not from 0 to 19"));
  }
  if (config.stream_interval < 1 || config.stream_interval > config.stream_buffer_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stream_interval=", config.stream_interval, " must be from 1 to --stream_buffer_tokens (",
        config.stream_buffer_tokens, "): a stream ends when more tokens than that wait"));
  }
  if (absl::Status s = CheckAtLeast("intra_op_threads", config.intra_op_threads, 0); !s.ok()) {
    return s;
  }
  if (config.liveness_stall <= absl::ZeroDuration()) {
    return Invalid("--liveness_stall_seconds must be positive");
  }
  if (config.drain_timeout < absl::ZeroDuration()) {
    return Invalid("--drain_timeout must not be negative");
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> ServerConfigFromFlags() {
  ServerConfig config;
  config.model_repository = absl::GetFlag(FLAGS_model_repository);
  config.default_model = absl::GetFlag(FLAGS_default_model);
  config.repository = RepositoryFromFlags();
  const std::string weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  const std::optional<models::WeightDtype> dtype = models::ParseWeightDtype(weight_dtype);
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight_dtype must be fp32, bf16 or int8, got '", weight_dtype, "'"));
  }
  config.repository.decode_step.weight_dtype = *dtype;
  config.intra_op_threads = absl::GetFlag(FLAGS_intra_op_threads);
  config.cuda_same_bits = absl::GetFlag(FLAGS_cuda_same_bits);
  config.stream_buffer_tokens = absl::GetFlag(FLAGS_stream_buffer_tokens);
  config.stream_interval = absl::GetFlag(FLAGS_stream_interval);
  config.io_thread_nice = absl::GetFlag(FLAGS_io_thread_nice);
  config.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  config.liveness_stall = absl::Seconds(absl::GetFlag(FLAGS_liveness_stall_seconds));
  config.grpc = GrpcFromFlags();
  config.http = HttpFromFlags();
  absl::StatusOr<MetricsConfig> metrics = MetricsFromFlags();
  if (!metrics.ok()) return metrics.status();
  config.metrics = *std::move(metrics);
  config.security = SecurityFromFlags();
  config.session_peers.peers = absl::GetFlag(FLAGS_session_peers);
  config.session_peers.token_file = absl::GetFlag(FLAGS_session_peer_token_file);
  config.session_peers.ca_file = absl::GetFlag(FLAGS_session_peer_ca_file);
  config.session_peers.timeout = absl::GetFlag(FLAGS_session_peer_timeout);
  if (absl::Status s = ValidateServerConfig(config); !s.ok()) return s;
  return config;
}

}  // namespace performer::server
