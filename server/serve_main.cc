// performer-serve's program: hosts the models of a model repository over
// gRPC (performer.v1.Generation, inference.GRPCInferenceService: the Open
// Inference Protocol, grpc.health.v1.Health, and with --reflection server
// reflection), all on one port.
//
// Shutdown on SIGTERM or SIGINT: health turns NOT_SERVING at once, new
// requests get UNAVAILABLE, running requests finish (up to --drain_timeout;
// the rest end with UNAVAILABLE), then the process exits 0. Before the
// models have loaded, SIGTERM or SIGINT ends the process at once with status
// 128 + the signal number (nothing is served yet, and loading cannot be
// interrupted).
//
// A model folder that fails to load stops the start (exit 1, the folder and
// the reason logged) unless --skip_bad_models; with no loadable model at all
// the exit is 1 either way.
//
// Security (docs/serving.md, "Security"): TLS and mutual TLS on the gRPC
// port, bearer tokens checked for every call of every service on it but
// gRPC health, a token for /metrics; SIGHUP re-reads the token files, and
// every file is re-read when it changes. Streams already open go on.
#include "server/serve_main.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/runtime/torch_runtime.h"
#include "server/logging/request_log.h"
#include "server/logging/server_log.h"
#include "server/metrics/metrics_endpoint.h"
#include "server/metrics/server_metrics.h"
#include "server/repository/model_repository.h"
#include "server/security/call_gate.h"
#include "server/security/credential_reloader.h"
#include "server/security/secret_token.h"
#include "server/security/tls_credentials.h"
#include "server/security/token_authenticator.h"
#include "server/service/generation_service.h"
#include "server/service/inference_service.h"
#include "server/service/unparsable_request.h"

#ifndef PERFORMER_DEFAULT_MODEL_REPOSITORY
#define PERFORMER_DEFAULT_MODEL_REPOSITORY "models"
#endif

ABSL_FLAG(std::string, host, "0.0.0.0",
          "Address of the gRPC port. All interfaces by default, as a container needs; on a "
          "shared host bind 127.0.0.1 or use TLS and tokens.");
ABSL_FLAG(int32_t, port, 50051, "gRPC port; 0 picks a free port (see --port_file).");
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
ABSL_FLAG(int64_t, max_batch, 64, "Per model: at most this many sequences decode together.");
ABSL_FLAG(int64_t, max_queue, 256,
          "Per model: requests that may wait for a slot; beyond it RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_new_tokens_limit, 4096, "Largest max_new_tokens a request may ask for.");
ABSL_FLAG(int64_t, max_request_id_bytes, 128,
          "Longest request_id a client may name (it is echoed in every streamed message).");
ABSL_FLAG(int64_t, max_stop_strings, 16, "Most stop_strings one request may give.");
ABSL_FLAG(int64_t, max_stop_string_bytes, 256, "Longest stop string, in bytes.");
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
ABSL_FLAG(int64_t, prefix_cache_bytes, int64_t{256} << 20,
          "Per model: memory for the prefix-state cache (the state after prompt prefixes, "
          "reused by later prompts that start the same way); 0 turns it off. Separate from "
          "--state_memory_bytes: a full cache evicts, it never refuses a request.");
ABSL_FLAG(bool, prefix_cache_on_device, true,
          "Keep the prefix-state cache in the model's device memory, which --prefix_cache_bytes "
          "then counts: on a GPU a device copy per cached prompt. false keeps it in host memory "
          "(on a GPU a transfer per prompt that waits for the device). On a CPU the same memory.");
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
ABSL_FLAG(int64_t, stream_buffer_tokens, 1024,
          "Generated tokens a streaming client may fall behind before its stream is ended "
          "with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_message_bytes, 4 << 20,
          "Largest gRPC message received or sent, 1 to 2147483647 bytes.");
ABSL_FLAG(std::string, device, "cpu",
          "Where models run: cpu, or cuda[:N] with a CUDA LibTorch (docs/gpu.md).");
ABSL_FLAG(int32_t, intra_op_threads, 0, "LibTorch intra-op threads (0 = one per online CPU).");
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
          "An engine with work that completes no step for this long is stuck: health \"\" "
          "turns NOT_SERVING and performer_engine_healthy drops to 0.");
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
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Bearer tokens, one per line: <token> [<name> [<permission>,...]] (permissions: "
          "priority, cancel_any, admin; docs/serving.md#security). Every call but "
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
ABSL_FLAG(int32_t, credentials_reload_seconds, 10,
          "How often the token files and the TLS files are checked for changes and re-read "
          "(at least 1). SIGHUP re-reads the token files at once.");
ABSL_FLAG(int64_t, test_stall_engine_after_steps, 0,
          "TEST HOOK: every engine blocks after this many decode steps (0 = never).");
ABSL_FLAG(int32_t, test_load_delay_ms, 0,
          "TEST HOOK: sleep this long before loading each model folder.");
ABSL_FLAG(int32_t, step_delay_ms, 0,
          "TEST HOOK: sleep this long in every engine step (keeps requests running in tests).");

namespace {

using performer::server::CallGate;
using performer::server::CredentialReloader;
using performer::server::GatedServerCredentials;
using performer::server::GenerationService;
using performer::server::InferenceService;
using performer::server::LogEvent;
using performer::server::LogFields;
using performer::server::ModelRepository;
namespace level = spdlog::level;

// grpc.health.v1 names. Readiness: "" and kServiceName (and one per model)
// are SERVING once every model has loaded and run its warm-up step, and
// NOT_SERVING while draining or while an engine is stuck. Liveness:
// kLivenessName follows only the engine heartbeat, so a draining server is
// not restarted by its liveness probe.
constexpr char kServiceName[] = "performer.v1.Generation";
constexpr char kLivenessName[] = "liveness";

// Leaves out the gRPC reflection plugin, which grpc++_reflection registers
// for every server as soon as the library loads.
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& plugin) {
                                    return absl::StrContains(plugin->name(), "reflection");
                                  }),
                   plugins->end());
  }
};

// Takes SIGTERM and SIGINT while the process starts. Loading runs inside
// LibTorch on the compute thread and cannot be interrupted, and nothing is
// served yet: a signal then logs and ends the process at once with status
// 128 + the signal (no drain, no hang until loading completes). Made after
// the signals are blocked. Finish() ends the watch once serving begins; a
// signal it caught in that instant is handed to the serving loop.
class StartupSignalWatcher {
 public:
  StartupSignalWatcher() : thread_([this] { Watch(); }) {}
  ~StartupSignalWatcher() { Finish(); }
  StartupSignalWatcher(const StartupSignalWatcher&) = delete;
  StartupSignalWatcher& operator=(const StartupSignalWatcher&) = delete;

  // Stops watching; returns the signal caught as it stopped, else 0.
  int Finish() {
    if (thread_.joinable()) {
      done_.store(true);
      thread_.join();
    }
    return handed_over_;
  }

 private:
  void Watch() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    const timespec poll = {0, 100 * 1000 * 1000};
    while (!done_.load()) {
      const int signal_number = sigtimedwait(&set, nullptr, &poll);
      if (signal_number <= 0) continue;
      if (done_.load()) {
        handed_over_ = signal_number;
        return;
      }
      LogEvent(level::critical, "signal during start-up: exiting before serving",
               {{"signal", signal_number}, {"exit_status", 128 + signal_number}});
      spdlog::default_logger_raw()->flush();
      _exit(128 + signal_number);
    }
  }

  std::atomic<bool> done_{false};
  int handed_over_ = 0;  // Written by the thread, read after the join.
  std::thread thread_;
};

// A start-up failure: logged, and the process exits with `code`.
int Fail(int code, std::string_view message) {
  LogEvent(level::critical, message);
  return code;
}

// Holds gRPC initialised for the whole run: the core credentials and the
// certificate file watcher are made before any grpc++ object that would
// initialise the library.
class GrpcLibrary {
 public:
  GrpcLibrary() { grpc_init(); }
  ~GrpcLibrary() { grpc_shutdown(); }
  GrpcLibrary(const GrpcLibrary&) = delete;
  GrpcLibrary& operator=(const GrpcLibrary&) = delete;
};

int Run() {
  // Every thread started from here on inherits this mask (gRPC's own threads
  // too, hence before grpc_init: a thread that did not block them would
  // take the signals with their default action and kill the process); the
  // signals are taken by sigtimedwait / sigwait, never by an asynchronous
  // handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reload credentials
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const GrpcLibrary grpc_library;
  if (absl::Status s = performer::server::InitLogging(absl::GetFlag(FLAGS_log_format),
                                                      absl::GetFlag(FLAGS_log_level));
      !s.ok()) {
    std::cerr << "performer-serve: " << s.message() << "\n";
    return 2;
  }
  StartupSignalWatcher startup_signals;

  performer::server::RepositoryOptions options;
  options.state_memory_bytes = absl::GetFlag(FLAGS_state_memory_bytes);
  options.max_batch = absl::GetFlag(FLAGS_max_batch);
  options.skip_bad_models = absl::GetFlag(FLAGS_skip_bad_models);
  options.test_load_delay = absl::Milliseconds(absl::GetFlag(FLAGS_test_load_delay_ms));
  options.device = absl::GetFlag(FLAGS_device);
  if (absl::Status s = performer::server::CheckServingDevice(options.device); !s.ok()) {
    return Fail(2, std::string(s.message()));
  }
  options.engine.max_queue = absl::GetFlag(FLAGS_max_queue);
  options.engine.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  options.engine.max_prefills_per_step = absl::GetFlag(FLAGS_max_prefills_per_step);
  options.engine.step_delay = absl::Milliseconds(absl::GetFlag(FLAGS_step_delay_ms));
  options.engine.stall_after_steps = absl::GetFlag(FLAGS_test_stall_engine_after_steps);
  performer::server::RequestBounds& bounds = options.engine.request_bounds;
  bounds.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens_limit);
  bounds.max_request_id_bytes = absl::GetFlag(FLAGS_max_request_id_bytes);
  bounds.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  bounds.max_stop_string_bytes = absl::GetFlag(FLAGS_max_stop_string_bytes);
  bounds.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  if (bounds.max_new_tokens < 1 || bounds.max_request_id_bytes < 1 || bounds.max_stop_strings < 0 ||
      bounds.max_stop_string_bytes < 1 || bounds.max_prompt_bytes < 1) {
    return Fail(2,
                "--max_new_tokens_limit, --max_request_id_bytes, --max_stop_string_bytes and "
                "--max_prompt_bytes must be positive, --max_stop_strings non-negative");
  }
  // gRPC takes message sizes and stream counts as int: a larger value would
  // wrap (4294967296 becomes 0 and refuses every message).
  const int64_t message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (message_bytes < 1 || message_bytes > std::numeric_limits<int32_t>::max()) {
    return Fail(2, absl::StrCat("--max_message_bytes must be 1 to ",
                                std::numeric_limits<int32_t>::max(), ", got ", message_bytes));
  }
  if (absl::GetFlag(FLAGS_max_concurrent_streams) < 1) {
    return Fail(2, "--max_concurrent_streams must be at least 1");
  }
  options.engine.prefix_cache.max_bytes = absl::GetFlag(FLAGS_prefix_cache_bytes);
  options.engine.prefix_cache.on_device = absl::GetFlag(FLAGS_prefix_cache_on_device);
  options.engine.prefix_cache.interval_tokens =
      absl::GetFlag(FLAGS_prefix_cache_interval_tokens) == 0
          ? options.engine.prefill_chunk_tokens
          : absl::GetFlag(FLAGS_prefix_cache_interval_tokens);
  options.engine.sessions.max_bytes = absl::GetFlag(FLAGS_session_bytes);
  options.engine.sessions.ttl = absl::Seconds(absl::GetFlag(FLAGS_session_ttl_seconds));
  options.engine.sessions.spill_dir = absl::GetFlag(FLAGS_state_spill_dir);

  performer::server::MetricBuckets buckets = performer::server::MetricBuckets::Defaults();
  for (auto [flag, name, target] :
       {std::make_tuple(&FLAGS_request_seconds_buckets, "request_seconds_buckets",
                        &buckets.request_seconds),
        std::make_tuple(&FLAGS_token_seconds_buckets, "token_seconds_buckets",
                        &buckets.token_seconds),
        std::make_tuple(&FLAGS_token_count_buckets, "token_count_buckets", &buckets.token_counts),
        std::make_tuple(&FLAGS_batch_size_buckets, "batch_size_buckets", &buckets.batch_sizes)}) {
    const std::string text = absl::GetFlag(*flag);
    if (text.empty()) continue;
    absl::StatusOr<std::vector<double>> parsed = performer::server::ParseBuckets(text, name);
    if (!parsed.ok()) return Fail(2, std::string(parsed.status().message()));
    *target = *parsed;
  }
  performer::server::ServerMetrics metrics(buckets);
  options.observer_for_model = [&metrics](const std::string& model) {
    return metrics.ForModel(model);
  };
  const absl::Duration stall = absl::Seconds(absl::GetFlag(FLAGS_liveness_stall_seconds));
  if (options.max_batch < 1 || options.engine.max_queue < 0 ||
      options.engine.prefill_chunk_tokens < 1 || options.state_memory_bytes < 1 ||
      options.engine.max_prefills_per_step < 1) {
    return Fail(2,
                "--max_batch, --prefill_chunk_tokens, --max_prefills_per_step and "
                "--state_memory_bytes must be positive, --max_queue non-negative");
  }
  if (options.engine.prefix_cache.max_bytes < 0 || options.engine.sessions.max_bytes < 0 ||
      absl::GetFlag(FLAGS_session_ttl_seconds) < 1 ||
      options.engine.prefix_cache.interval_tokens < 1 ||
      options.engine.prefix_cache.interval_tokens % options.engine.prefill_chunk_tokens != 0) {
    return Fail(2,
                "--prefix_cache_bytes and --session_bytes must be non-negative, "
                "--session_ttl_seconds positive, and --prefix_cache_interval_tokens a positive "
                "multiple of --prefill_chunk_tokens (a cached prefix must end where a cold "
                "prefill ends a chunk, so that resuming from it gives the same tokens)");
  }
  // Credentials, read and checked before anything listens, so that a bad
  // file stops the start with a message naming it.
  const int reload_seconds = absl::GetFlag(FLAGS_credentials_reload_seconds);
  if (reload_seconds < 1) return Fail(2, "--credentials_reload_seconds must be at least 1");
  performer::server::TlsFiles tls_files{absl::GetFlag(FLAGS_tls_cert_file),
                                        absl::GetFlag(FLAGS_tls_key_file),
                                        absl::GetFlag(FLAGS_tls_client_ca_file)};
  const bool tls = !tls_files.cert_file.empty();
  if (tls_files.cert_file.empty() != tls_files.key_file.empty()) {
    return Fail(2, "--tls_cert_file and --tls_key_file go together");
  }
  if (!tls && !tls_files.client_ca_file.empty()) {
    return Fail(2, "--tls_client_ca_file needs --tls_cert_file and --tls_key_file");
  }
  if (tls) {
    if (absl::Status s = performer::server::CheckTlsFiles(tls_files); !s.ok()) {
      return Fail(2, std::string(s.message()));
    }
  }
  std::unique_ptr<performer::server::TokenAuthenticator> tokens;
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens_file); !path.empty()) {
    absl::StatusOr<std::unique_ptr<performer::server::TokenAuthenticator>> loaded =
        performer::server::TokenAuthenticator::FromFile(path);
    if (!loaded.ok()) {
      return Fail(2, absl::StrCat("--auth_tokens_file: ", loaded.status().message()));
    }
    tokens = *std::move(loaded);
    if (tokens->size() == 0) {
      LogEvent(level::warn, "the token file holds no token: every call but health is refused",
               {{"file", path}});
    }
    if (!tls) {
      LogEvent(level::warn,
               "bearer tokens without TLS: anyone on the network path can read them; set "
               "--tls_cert_file unless the network itself is encrypted");
    }
  }
  std::unique_ptr<performer::server::SecretToken> metrics_token;
  if (const std::string path = absl::GetFlag(FLAGS_metrics_auth_token_file); !path.empty()) {
    absl::StatusOr<std::unique_ptr<performer::server::SecretToken>> loaded =
        performer::server::SecretToken::FromFile(path);
    if (!loaded.ok()) {
      return Fail(2, absl::StrCat("--metrics_auth_token_file: ", loaded.status().message()));
    }
    metrics_token = *std::move(loaded);
  }
  CredentialReloader reloader(&metrics);
  if (tokens) {
    reloader.Add({"auth_tokens", {tokens->path()}, [&tokens] { return tokens->Reload(); }});
  }
  if (metrics_token) {
    reloader.Add({"metrics_token", {metrics_token->path()}, [&metrics_token] {
                    return metrics_token->Reload();
                  }});
  }
  if (tls) {
    // gRPC's file watcher swaps the certificates itself; this check reports
    // whether the new files are usable.
    std::vector<std::string> paths = {tls_files.cert_file, tls_files.key_file};
    if (!tls_files.client_ca_file.empty()) paths.push_back(tls_files.client_ca_file);
    reloader.Add(
        {"tls", paths, [tls_files] { return performer::server::CheckTlsFiles(tls_files); }});
  }

  // The metrics exposer (prometheus-cpp's own HTTP server) on its own port,
  // started before the models load (its collectables are added below).
  std::unique_ptr<prometheus::Exposer> exposer;
  int metrics_port = -1;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    const std::string metrics_host = absl::GetFlag(FLAGS_metrics_host);
    performer::server::MetricsEndpointOptions endpoint;
    endpoint.host = metrics_host;
    endpoint.port = absl::GetFlag(FLAGS_metrics_port);
    endpoint.token = metrics_token.get();
    absl::StatusOr<std::unique_ptr<prometheus::Exposer>> started =
        performer::server::StartMetricsEndpoint(endpoint);
    if (!started.ok()) return Fail(1, std::string(started.status().message()));
    exposer = *std::move(started);
    metrics_port = performer::server::MetricsEndpointPort(*exposer);
    if (!metrics_token && metrics_host != "127.0.0.1" && metrics_host != "localhost" &&
        metrics_host != "::1" && metrics_host != "[::1]") {
      LogEvent(level::warn,
               "metrics are served beyond loopback without a token; set "
               "--metrics_auth_token_file unless the network restricts who reaches them",
               {{"metrics_host", metrics_host}});
    }
  }
  const performer::TorchRuntimeInfo runtime =
      performer::ConfigureTorchRuntime(absl::GetFlag(FLAGS_intra_op_threads));
  LogEvent(level::info, "runtime",
           {{"torch", performer::DescribeTorchRuntime(runtime)}, {"device", options.device}});
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository = ModelRepository::Load(
      absl::GetFlag(FLAGS_model_repository), options, absl::GetFlag(FLAGS_default_model));
  if (!repository.ok()) return Fail(1, repository.status().ToString());
  // Serving starts: from here SIGTERM drains.
  int signal_number = startup_signals.Finish();

  performer::server::ServiceOptions service_options;
  service_options.stream_buffer_tokens = absl::GetFlag(FLAGS_stream_buffer_tokens);
  service_options.tokens = tokens.get();
  service_options.max_priority_unprivileged = absl::GetFlag(FLAGS_max_priority_unprivileged);
  service_options.security_observer = &metrics;
  performer::server::RequestLog request_log;
  service_options.observers.push_back(&metrics);
  service_options.observers.push_back(&request_log);
  metrics.AddRepository(**repository, stall);
  prometheus::BuildGauge()
      .Name("performer_models_failed_to_load")
      .Help("Model folders that failed to load and are not served (--skip_bad_models)")
      .Register(*metrics.registry())
      .Add({})
      .Set(static_cast<double>((*repository)->failed_models().size()));
  if (exposer) {
    for (const auto& collectable : metrics.collectables())
      exposer->RegisterCollectable(collectable);
  }

  GenerationService service(**repository, service_options);
  InferenceService inference_service(**repository, service_options, stall);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  if (absl::GetFlag(FLAGS_reflection)) {
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  } else {
    builder.SetOption(std::make_unique<WithoutReflection>());
  }
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  int port = 0;
  // The gate checks every call on the port, whichever service it is for.
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls || tokens) {
    credentials = std::make_shared<GatedServerCredentials>(
        tls ? performer::server::NewTlsCoreCredentials(tls_files, reload_seconds)
            : performer::server::NewPlaintextCoreCredentials(),
        CallGate{tokens.get(), /*health_only=*/false, &metrics});
  }
  builder.AddListeningPort(address, credentials, &port);
  const int health_port_flag = absl::GetFlag(FLAGS_health_port);
  int health_port = 0;
  const std::string health_address = absl::StrCat(absl::GetFlag(FLAGS_host), ":", health_port_flag);
  if (health_port_flag >= 0) {
    builder.AddListeningPort(
        health_address,
        std::make_shared<GatedServerCredentials>(performer::server::NewPlaintextCoreCredentials(),
                                                 CallGate{nullptr, /*health_only=*/true, nullptr}),
        &health_port);
  }
  builder.RegisterService(&service);
  builder.RegisterService(&inference_service);
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::make_unique<performer::server::UnparsableRequestInterceptorFactory>(
        service_options.observers));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             absl::GetFlag(FLAGS_max_concurrent_streams));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, absl::GetFlag(FLAGS_keepalive_time_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             absl::GetFlag(FLAGS_keepalive_timeout_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             absl::GetFlag(FLAGS_keepalive_min_client_ping_ms));
  if (absl::GetFlag(FLAGS_grpc_max_threads) > 0) {
    grpc::ResourceQuota quota("performer-serve");
    quota.SetMaxThreads(absl::GetFlag(FLAGS_grpc_max_threads));
    builder.SetResourceQuota(quota);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return Fail(1, absl::StrCat("could not listen on ", address));
  if (health_port_flag >= 0 && health_port == 0) {
    return Fail(1, absl::StrCat("could not listen on ", health_address, " (--health_port)"));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus(kLivenessName, true);
  for (const auto& model : (*repository)->models()) {
    health->SetServingStatus(absl::StrCat(kServiceName, "/", model->name), true);
  }
  // Port files are written whole under a temporary name, so a reader never
  // sees half of one; the metrics port first, so the gRPC port file alone
  // signals readiness.
  auto write_port = [](const std::string& path, int value) {
    if (path.empty()) return;
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << value << "\n";
    std::rename(tmp.c_str(), path.c_str());
  };
  write_port(absl::GetFlag(FLAGS_metrics_port_file), metrics_port);
  write_port(absl::GetFlag(FLAGS_port_file), port);

  // Liveness: a stuck engine (work waiting, no step within the window)
  // turns the overall health NOT_SERVING until it moves again.
  std::mutex monitor_mu;
  std::condition_variable monitor_cv;
  bool monitor_stop = false;
  std::thread monitor([&] {
    bool was_healthy = true;
    std::unique_lock<std::mutex> lock(monitor_mu);
    while (
        !monitor_cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return monitor_stop; })) {
      bool healthy = true;
      for (const auto& model : (*repository)->models()) {
        if (model->engine && !model->engine->Healthy(stall)) {
          healthy = false;
          if (was_healthy) {
            performer::server::LogEngineEvent("stalled", model->name,
                                              {{"stall_seconds", absl::ToDoubleSeconds(stall)}},
                                              level::critical);
          }
        }
      }
      if (healthy != was_healthy) {
        health->SetServingStatus(healthy);  // every name, liveness included
        was_healthy = healthy;
      }
    }
  });
  if (!reloader.empty()) reloader.StartPolling(absl::Seconds(reload_seconds));
  LogEvent(
      level::info, "listening",
      {{"address", absl::StrCat(absl::GetFlag(FLAGS_host), ":", port)},
       {"tls", !tls                               ? "off"
               : tls_files.client_ca_file.empty() ? "on"
                                                  : "mutual"},
       {"auth_tokens", tokens ? static_cast<int64_t>(tokens->size()) : int64_t{-1}},
       {"health_port", health_port_flag >= 0 ? health_port : -1},
       {"metrics_port", metrics_port},
       {"metrics_auth", metrics_token != nullptr},
       {"reflection", absl::GetFlag(FLAGS_reflection)},
       {"default_model", (*repository)->default_model()},
       {"models_failed_to_load", static_cast<int64_t>((*repository)->failed_models().size())}});

  while (signal_number != SIGTERM && signal_number != SIGINT) {
    if (signal_number == SIGHUP) reloader.ReloadAll("SIGHUP");
    if (sigwait(&signals, &signal_number) != 0) break;
  }
  LogEvent(level::info, "drain",
           {{"signal", signal_number},
            {"timeout_seconds", absl::ToDoubleSeconds(absl::GetFlag(FLAGS_drain_timeout))}});
  {
    std::lock_guard<std::mutex> lock(monitor_mu);
    monitor_stop = true;
  }
  monitor_cv.notify_all();
  monitor.join();
  // Not ready from now on; liveness keeps its last value.
  health->SetServingStatus("", false);
  health->SetServingStatus(kServiceName, false);
  for (const auto& model : (*repository)->models()) {
    health->SetServingStatus(absl::StrCat(kServiceName, "/", model->name), false);
  }
  service.BeginDrain();
  inference_service.BeginDrain();
  (*repository)->BeginDrain();
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);
  if (!(*repository)->WaitIdle(drain)) {
    LogEvent(level::warn, "drain timeout: ending the requests still running with UNAVAILABLE",
             {{"timeout_seconds", absl::ToDoubleSeconds(drain)}});
  }
  (*repository)->Stop();
  // Sessions outlive the process in the spill folder (state hand-off).
  for (const auto& model : (*repository)->models()) {
    if (model->engine == nullptr) continue;
    if (absl::Status s = model->engine->SpillSessions(); !s.ok()) {
      performer::server::LogEngineEvent("spill", model->name, {{"error", s.ToString()}},
                                        level::err);
    }
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  LogEvent(level::info, "stopped");
  return 0;
}

}  // namespace

int performer::server::ServeMain(int argc, char** argv) {
  // Debian's Abseil is built in debug mode, where every Mutex lock records
  // the lock order in one process-wide graph (under a global lock) and a
  // cycle ever observed in that history aborts the process, a deadlock or
  // not. The tests keep the check; a serving process must not die of it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // --help lists this file's flags (absl's default matches files named
  // after the program).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "server/serve_main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "Serves Performer models over gRPC (performer.v1.Generation and the Open Inference\n"
      "Protocol, inference.GRPCInferenceService).\n"
      "Usage: performer-serve [--model_repository=DIR] [--port=N] [flags]");
  absl::ParseCommandLine(argc, argv);
  return Run();
}
