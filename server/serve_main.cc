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
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/runtime/torch_runtime.h"
#include "kernels/cuda_row_invariance.h"
#include "server/engine/compute_thread.h"
#include "server/engine/state_signature.h"
#include "server/http/http_listener.h"
#include "server/http/http_tls.h"
#include "server/http/open_inference_rest.h"
#include "server/http/openai_response.h"
#include "server/http/openai_service.h"
#include "server/logging/request_log.h"
#include "server/logging/server_log.h"
#include "server/metrics/metrics_endpoint.h"
#include "server/metrics/server_metrics.h"
#include "server/process/heap_release.h"
#include "server/process/listener_watch.h"
#include "server/process/open_file_limit.h"
#include "server/process/thread_priority.h"
#include "server/repository/model_repository.h"
#include "server/security/call_gate.h"
#include "server/security/credential_reloader.h"
#include "server/security/secret_token.h"
#include "server/security/tls_credentials.h"
#include "server/security/token_authenticator.h"
#include "server/security/token_file.h"
#include "server/server_config.h"
#include "server/service/generation_service.h"
#include "server/service/inference_service.h"
#include "server/service/session_peers.h"
#include "server/service/unparsable_request.h"

namespace {

using performer::server::CallGate;
using performer::server::CredentialReloader;
using performer::server::GatedServerCredentials;
using performer::server::GenerationService;
using performer::server::GrpcConfig;
using performer::server::InferenceService;
using performer::server::ListenerWatch;
using performer::server::LogEvent;
using performer::server::LogFields;
using performer::server::MetricsConfig;
using performer::server::ModelRepository;
using performer::server::SecretToken;
using performer::server::SecurityConfig;
using performer::server::ServerConfig;
using performer::server::ServerMetrics;
using performer::server::SessionPeers;
using performer::server::TlsFiles;
using performer::server::TokenAuthenticator;
namespace level = spdlog::level;

// The request metadata gRPC accepts on a call: tokens, session ids and
// request ids fit many times over. It bounds a complete header block; one
// that never ends (a CONTINUATION flood) is buffered by gRPC 1.51 before the
// check, which only a proxy in front stops (docs/reliability.md).
constexpr int kMaxMetadataBytes = 16 * 1024;
// Freed heap is returned to the system once the allocator's free bytes have
// grown by more than the first, or by more than the second and stopped
// moving (process/heap_release.h).
constexpr size_t kHeapReleaseBurstBytes = size_t{128} << 20;
constexpr size_t kHeapReleaseSettledBytes = size_t{16} << 20;

// grpc.health.v1 names (SetReadiness, LivenessMonitor).
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

// Every thread started after this inherits the mask (gRPC's own threads
// too, hence before grpc_init: a thread that did not block them would take
// the signals with their default action and kill the process); the signals
// are taken by sigtimedwait / sigwait, never by an asynchronous handler.
sigset_t BlockServingSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reload credentials
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The credentials of the run, read and checked before anything listens, so
// that a bad file stops the start with a message naming it.
struct Credentials {
  std::unique_ptr<TokenAuthenticator> tokens;  // null: no bearer tokens
  std::unique_ptr<SecretToken> metrics_token;  // null: /metrics is open
  // The peers sessions move from, with what this replica presents to them;
  // null: none.
  std::unique_ptr<SessionPeers> session_peers;
  std::string state_signing_key;  // empty: states are not signed
  // HTTPS for --http_port from the TLS files; null: plaintext or no HTTP.
  std::unique_ptr<performer::server::HttpTls> http_tls;
};

// --state_signing_key_file's key, trailing whitespace (a newline) removed.
absl::StatusOr<std::string> LoadSigningKey(const std::string& path) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> key = performer::server::ReadSecretFile(path);
  if (!key.ok()) {
    return absl::Status(key.status().code(),
                        absl::StrCat("--state_signing_key_file: ", key.status().message()));
  }
  while (!key->empty() && absl::ascii_isspace(key->back())) key->pop_back();
  if (key->size() < performer::server::kMinSigningKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state_signing_key_file: ", path, " holds ", key->size(), " bytes; a key has at least ",
        performer::server::kMinSigningKeyBytes, " (e.g. openssl rand -base64 48)"));
  }
  return key;
}

// The repository's options: the config's, with the metrics per model and
// the signing key.
performer::server::RepositoryOptions RepositoryOptionsFor(const ServerConfig& config,
                                                          const Credentials& credentials,
                                                          ServerMetrics& metrics) {
  performer::server::RepositoryOptions options = config.repository;
  options.observer_for_model = [&metrics](const std::string& model) {
    return metrics.ForModel(model);
  };
  options.engine.sessions.signing_key = credentials.state_signing_key;
  return options;
}

// --session_peers and the files it is called with.
absl::StatusOr<std::unique_ptr<SessionPeers>> LoadSessionPeers(const ServerConfig& config) {
  const performer::server::SessionPeerConfig& peers = config.session_peers;
  if (peers.peers.empty()) return nullptr;
  performer::server::SessionPeerOptions options;
  options.peers = peers.peers;
  options.timeout = peers.timeout;
  if (!peers.token_file.empty()) {
    absl::StatusOr<std::string> token = performer::server::ReadOneToken(peers.token_file);
    if (!token.ok()) {
      return absl::Status(token.status().code(),
                          absl::StrCat("--session_peer_token_file: ", token.status().message()));
    }
    options.token = *std::move(token);
  }
  for (auto [flag, path, target] :
       {std::make_tuple("--session_peer_ca_file", peers.ca_file, &options.ca_pem),
        std::make_tuple("--tls_cert_file",
                        peers.ca_file.empty() ? "" : config.security.tls.cert_file,
                        &options.cert_pem),
        std::make_tuple("--tls_key_file", peers.ca_file.empty() ? "" : config.security.tls.key_file,
                        &options.key_pem)}) {
    if (path.empty()) continue;
    absl::StatusOr<std::string> text = performer::server::ReadSecretFile(path);
    if (!text.ok()) {
      return absl::Status(text.status().code(), absl::StrCat(flag, ": ", text.status().message()));
    }
    *target = *std::move(text);
  }
  return std::make_unique<SessionPeers>(std::move(options));
}

absl::StatusOr<Credentials> LoadCredentials(const ServerConfig& config) {
  Credentials credentials;
  const SecurityConfig& security = config.security;
  if (security.tls_on()) {
    if (absl::Status s = performer::server::CheckTlsFiles(security.tls); !s.ok()) return s;
    if (config.http.port >= 0) {
      absl::StatusOr<std::unique_ptr<performer::server::HttpTls>> http_tls =
          performer::server::HttpTls::Load(
              {security.tls.cert_file, security.tls.key_file, security.tls.client_ca_file});
      if (!http_tls.ok()) return http_tls.status();
      credentials.http_tls = *std::move(http_tls);
    }
  }
  if (!security.auth_tokens_file.empty()) {
    absl::StatusOr<std::unique_ptr<TokenAuthenticator>> loaded =
        TokenAuthenticator::FromFile(security.auth_tokens_file);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("--auth_tokens_file: ", loaded.status().message()));
    }
    credentials.tokens = *std::move(loaded);
    if (credentials.tokens->size() == 0) {
      LogEvent(level::warn, "the token file holds no token: every call but health is refused",
               {{"file", security.auth_tokens_file}});
    }
    if (!security.tls_on()) {
      LogEvent(level::warn,
               "bearer tokens without TLS: anyone on the network path can read them; set "
               "--tls_cert_file unless the network itself is encrypted");
    }
  }
  if (const std::string& path = config.metrics.auth_token_file; !path.empty()) {
    absl::StatusOr<std::unique_ptr<SecretToken>> loaded = SecretToken::FromFile(path);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("--metrics_auth_token_file: ", loaded.status().message()));
    }
    credentials.metrics_token = *std::move(loaded);
  }
  absl::StatusOr<std::unique_ptr<SessionPeers>> peers = LoadSessionPeers(config);
  if (!peers.ok()) return peers.status();
  credentials.session_peers = *std::move(peers);
  absl::StatusOr<std::string> key = LoadSigningKey(security.state_signing_key_file);
  if (!key.ok()) return key.status();
  credentials.state_signing_key = *std::move(key);
  return credentials;
}

// Re-reads every credential file on change and on SIGHUP.
void WatchCredentials(const SecurityConfig& security, Credentials& credentials,
                      CredentialReloader& reloader) {
  if (TokenAuthenticator* tokens = credentials.tokens.get()) {
    reloader.Add({"auth_tokens", {tokens->path()}, [tokens] { return tokens->Reload(); }});
  }
  if (SecretToken* token = credentials.metrics_token.get()) {
    reloader.Add({"metrics_token", {token->path()}, [token] { return token->Reload(); }});
  }
  if (security.tls_on()) {
    // gRPC's file watcher swaps the certificates itself; this check reports
    // whether the new files are usable.
    const TlsFiles& tls = security.tls;
    std::vector<std::string> paths = {tls.cert_file, tls.key_file};
    if (!tls.client_ca_file.empty()) paths.push_back(tls.client_ca_file);
    performer::server::HttpTls* http_tls = credentials.http_tls.get();
    reloader.Add({"tls", paths, [tls, http_tls] {
                    absl::Status s = performer::server::CheckTlsFiles(tls);
                    if (s.ok() && http_tls != nullptr) s = http_tls->Reload();
                    return s;
                  }});
  }
}

// The metrics exposer (prometheus-cpp's own HTTP server) on its own port,
// started before the models load; null with --metrics_port=-1.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetrics(const MetricsConfig& metrics,
                                                                  const SecretToken* token) {
  if (metrics.port < 0) return std::unique_ptr<prometheus::Exposer>();
  performer::server::MetricsEndpointOptions endpoint;
  endpoint.host = metrics.host;
  endpoint.port = metrics.port;
  endpoint.token = token;
  absl::StatusOr<std::unique_ptr<prometheus::Exposer>> started =
      performer::server::StartMetricsEndpoint(endpoint);
  if (!started.ok()) return started;
  const std::string& host = metrics.host;
  if (token == nullptr && host != "127.0.0.1" && host != "localhost" && host != "::1" &&
      host != "[::1]") {
    LogEvent(level::warn,
             "metrics are served beyond loopback without a token; set "
             "--metrics_auth_token_file unless the network restricts who reaches them",
             {{"metrics_host", host}});
  }
  return started;
}

// What the exposer serves: the repository's gauges and every collectable.
void ExposeMetrics(ServerMetrics& metrics, const ModelRepository& repository, absl::Duration stall,
                   prometheus::Exposer* exposer) {
  metrics.AddRepository(repository, stall);
  prometheus::BuildGauge()
      .Name("performer_models_failed_to_load")
      .Help("Model folders that failed to load and are not served (--skip_bad_models)")
      .Register(*metrics.registry())
      .Add({})
      .Set(static_cast<double>(repository.failed_models().size()));
  if (exposer == nullptr) return;
  for (const auto& collectable : metrics.collectables()) exposer->RegisterCollectable(collectable);
}

// The gauge LivenessMonitor sets: 1 while every gRPC listener accepts (as
// they do once they listen).
prometheus::Gauge& ListenersAcceptingGauge(ServerMetrics& metrics) {
  prometheus::Gauge& gauge =
      prometheus::BuildGauge()
          .Name("performer_listeners_accepting")
          .Help(
              "1 while every gRPC listener accepts connections, 0 once one has left "
              "connections waiting for --liveness_stall_seconds")
          .Register(*metrics.registry())
          .Add({});
  gauge.Set(1);
  return gauge;
}

// The gRPC server and the ports it bound.
struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  int health_port = -1;  // -1: no health port
};

// The listening ports LivenessMonitor watches.
std::vector<int> ListeningPorts(const GrpcServer& grpc) {
  std::vector<int> ports = {grpc.port};
  if (grpc.health_port >= 0) ports.push_back(grpc.health_port);
  return ports;
}

// The transport settings of every listener.
void ConfigureTransport(const GrpcConfig& grpc, grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(static_cast<int>(grpc.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(grpc.max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, grpc.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, grpc.keepalive_time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, grpc.keepalive_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             grpc.keepalive_min_client_ping_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  // Identity only: gRPC 1.51 inflates a compressed message whole before it
  // checks the size (a 0.5 MB gzip request grew to 512 MB). A compressed
  // request is refused with UNIMPLEMENTED before its message is read.
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  if (grpc.max_threads > 0) {
    grpc::ResourceQuota quota("performer-serve");
    quota.SetMaxThreads(grpc.max_threads);
    builder.SetResourceQuota(quota);
  }
}

// Builds and starts the server with `services` on the port (and the health
// port); UNAVAILABLE naming the address it could not listen on.
absl::StatusOr<GrpcServer> StartGrpc(
    const ServerConfig& config, const Credentials& credentials, ServerMetrics& metrics,
    const std::vector<grpc::Service*>& services,
    const std::vector<performer::server::RpcObserver*>& observers) {
  const GrpcConfig& grpc = config.grpc;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  if (grpc.reflection) {
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  } else {
    builder.SetOption(std::make_unique<WithoutReflection>());
  }
  GrpcServer started;
  // The gate checks every call on the port, whichever service it is for.
  std::shared_ptr<grpc::ServerCredentials> server_credentials = grpc::InsecureServerCredentials();
  const SecurityConfig& security = config.security;
  if (security.tls_on() || credentials.tokens) {
    server_credentials = std::make_shared<GatedServerCredentials>(
        security.tls_on() ? performer::server::NewTlsCoreCredentials(
                                security.tls, security.credentials_reload_seconds)
                          : performer::server::NewPlaintextCoreCredentials(),
        CallGate{credentials.tokens.get(), /*health_only=*/false, &metrics});
  }
  builder.AddListeningPort(grpc.Address(grpc.port), server_credentials, &started.port);
  if (grpc.health_port >= 0) {
    builder.AddListeningPort(
        grpc.Address(grpc.health_port),
        std::make_shared<GatedServerCredentials>(performer::server::NewPlaintextCoreCredentials(),
                                                 CallGate{nullptr, /*health_only=*/true, nullptr}),
        &started.health_port);
  }
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(
      std::make_unique<performer::server::UnparsableRequestInterceptorFactory>(observers));
  builder.experimental().SetInterceptorCreators(std::move(creators));
  ConfigureTransport(grpc, builder);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat("could not listen on ", grpc.Address(grpc.port)));
  }
  if (grpc.health_port >= 0 && started.health_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("could not listen on ", grpc.Address(grpc.health_port), " (--health_port)"));
  }
  return started;
}

// grpc.health.v1 readiness: "" and kServiceName (and one per model) are
// SERVING once every model has loaded and run its warm-up step, and
// NOT_SERVING while draining or while an engine is stuck. Liveness:
// kLivenessName follows only the engine heartbeat, so a draining server is
// not restarted by its liveness probe.
void SetReadiness(grpc::HealthCheckServiceInterface& health, const ModelRepository& repository,
                  bool ready) {
  health.SetServingStatus("", ready);
  health.SetServingStatus(kServiceName, ready);
  for (const auto& model : repository.models()) {
    health.SetServingStatus(absl::StrCat(kServiceName, "/", model->name), ready);
  }
}

// Liveness: a stuck engine (work waiting, no step within the window) or a
// gRPC listener that stopped accepting (connections waiting to be accepted
// for the whole window: process/listener_watch.h) turns every health name
// NOT_SERVING, liveness included, until it moves again. Watches from
// construction to destruction; destroy it before the listeners close.
class LivenessMonitor {
 public:
  LivenessMonitor(grpc::HealthCheckServiceInterface& health, const ModelRepository& repository,
                  absl::Duration stall, const std::vector<int>& ports,
                  prometheus::Gauge& listeners_accepting)
      : health_(health),
        repository_(repository),
        stall_(stall),
        listeners_(ports),
        listeners_accepting_(listeners_accepting),
        thread_([this] { Watch(); }) {}
  ~LivenessMonitor() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

 private:
  bool Healthy(bool was_healthy) {
    bool healthy = ListenersAccepting(was_healthy);
    for (const auto& model : repository_.models()) {
      if (model->engine && !model->engine->Healthy(stall_)) {
        healthy = false;
        if (was_healthy) {
          performer::server::LogEngineEvent("stalled", model->name,
                                            {{"stall_seconds", absl::ToDoubleSeconds(stall_)}},
                                            level::critical);
        }
      }
    }
    return healthy;
  }

  bool ListenersAccepting(bool was_healthy) {
    const std::optional<ListenerWatch::Stall> stall = listeners_.Sample(absl::Now(), stall_);
    listeners_accepting_.Set(stall ? 0 : 1);
    if (stall && was_healthy) {
      LogEvent(level::critical, "listener stopped accepting",
               {{"port", stall->port},
                {"waiting_connections", stall->queued},
                {"stall_seconds", absl::ToDoubleSeconds(stall_)}});
    }
    return !stall;
  }

  void Watch() {
    bool was_healthy = true;
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(250))) {
      const bool healthy = Healthy(was_healthy);
      if (healthy != was_healthy) {
        health_.SetServingStatus(healthy);  // every name, liveness included
        was_healthy = healthy;
      }
    }
  }

  grpc::HealthCheckServiceInterface& health_;
  const ModelRepository& repository_;
  const absl::Duration stall_;
  ListenerWatch listeners_;  // sampled by the thread alone
  prometheus::Gauge& listeners_accepting_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is set
};

// Writes `value` to `path` whole under a temporary name, so that a reader
// never sees half of it; nothing for an empty path.
void WritePortFile(const std::string& path, int value) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << value << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

void LogListening(const ServerConfig& config, const Credentials& credentials,
                  const GrpcServer& grpc, int http_port, int metrics_port,
                  const ModelRepository& repository) {
  const SecurityConfig& security = config.security;
  LogEvent(level::info, "listening",
           {{"address", config.grpc.Address(grpc.port)},
            {"tls", !security.tls_on()                    ? "off"
                    : security.tls.client_ca_file.empty() ? "on"
                                                          : "mutual"},
            {"auth_tokens",
             credentials.tokens ? static_cast<int64_t>(credentials.tokens->size()) : int64_t{-1}},
            {"health_port", grpc.health_port},
            {"http_port", http_port},
            {"metrics_port", metrics_port},
            {"metrics_auth", credentials.metrics_token != nullptr},
            {"reflection", config.grpc.reflection},
            {"default_model", repository.default_model()},
            {"models_failed_to_load", static_cast<int64_t>(repository.failed_models().size())}});
}

// Serves until SIGTERM or SIGINT (`signal_number` may already be one, caught
// during start-up); SIGHUP reloads the credentials. Returns the signal.
int WaitForTermination(const sigset_t& signals, int signal_number, CredentialReloader& reloader) {
  while (signal_number != SIGTERM && signal_number != SIGINT) {
    if (signal_number == SIGHUP) reloader.ReloadAll("SIGHUP");
    if (sigwait(&signals, &signal_number) != 0) break;
  }
  return signal_number;
}

// The graceful drain: the repository refuses new work (it is the one owner
// of the drain), running requests get `timeout` to finish, the rest end with
// UNAVAILABLE; sessions go to the spill folder to outlive the process (state
// hand-off).
void Drain(ModelRepository& repository, absl::Duration timeout) {
  repository.BeginDrain();
  if (!repository.WaitIdle(timeout)) {
    LogEvent(level::warn, "drain timeout: ending the requests still running with UNAVAILABLE",
             {{"timeout_seconds", absl::ToDoubleSeconds(timeout)}});
  }
  repository.Stop();
  for (const auto& model : repository.models()) {
    if (model->engine == nullptr) continue;
    if (absl::Status s = model->engine->SpillSessions(); !s.ok()) {
      performer::server::LogEngineEvent("spill", model->name, {{"error", s.ToString()}},
                                        level::err);
    }
  }
}

// LibTorch's threads, the CUDA kernels' row invariance (before any model is
// loaded: CUDA graphs capture the kernels chosen then), and the "runtime"
// log line.
void ConfigureRuntime(const ServerConfig& config, uint64_t open_files_limit) {
  const performer::TorchRuntimeInfo runtime =
      performer::ConfigureTorchRuntime(config.intra_op_threads);
  performer::kernels::SetCudaRowInvariance(config.cuda_same_bits);
  LogEvent(level::info, "runtime",
           {{"torch", performer::DescribeTorchRuntime(runtime)},
            {"device", config.repository.device},
            {"cuda_same_bits", config.cuda_same_bits},
            {"open_files_limit", static_cast<int64_t>(open_files_limit)}});
}

// The models, loaded on the compute thread (which starts its OpenMP team
// there); then --io_thread_nice lowers every other thread, and the gRPC and
// HTTP threads started afterwards inherit the lowered value.
absl::StatusOr<std::unique_ptr<ModelRepository>> LoadModels(const ServerConfig& config,
                                                            const Credentials& credentials,
                                                            ServerMetrics& metrics) {
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository = ModelRepository::Load(
      config.model_repository, RepositoryOptionsFor(config, credentials, metrics),
      config.default_model);
  if (!repository.ok() || config.io_thread_nice == 0) return repository;
  absl::StatusOr<int> lowered = performer::server::LowerOtherThreads(
      config.io_thread_nice, performer::server::kComputeThreadName);
  if (!lowered.ok()) return lowered.status();
  return repository;
}

// What the services share; they report to `metrics` and `request_log`.
performer::server::ServiceOptions ServiceOptionsFor(const ServerConfig& config,
                                                    const Credentials& credentials,
                                                    ServerMetrics& metrics,
                                                    performer::server::RequestLog& request_log) {
  performer::server::ServiceOptions options;
  options.stream_buffer_tokens = config.stream_buffer_tokens;
  options.stream_interval = config.stream_interval;
  options.tokens = credentials.tokens.get();
  options.max_priority_unprivileged = config.security.max_priority_unprivileged;
  options.security_observer = &metrics;
  options.peers = credentials.session_peers.get();
  options.observers = {&metrics, &request_log};
  return options;
}

// The HTTP listener serving the OpenAI API and the Open Inference
// Protocol's REST form; null with --http_port=-1.
absl::StatusOr<std::unique_ptr<performer::server::HttpListener>> StartHttp(
    const ServerConfig& config, const Credentials& credentials,
    performer::server::OpenAiService& service, performer::server::OpenInferenceRest& rest) {
  if (config.http.port < 0) return nullptr;
  performer::server::HttpListenerOptions options;
  options.tls = credentials.http_tls.get();
  options.host = config.grpc.host;
  options.port = config.http.port;
  options.threads = config.http.threads;
  options.max_body_bytes = config.grpc.max_message_bytes;
  options.max_connections = config.http.max_connections;
  options.error_body = [](int http_status, const absl::Status& status) {
    return performer::server::ErrorJson(status, http_status);
  };
  return performer::server::HttpListener::Start(
      options, [&service, &rest](const performer::server::HttpRequest& request,
                                 const std::shared_ptr<performer::server::HttpExchange>& exchange) {
        if (performer::server::OpenInferenceRest::Serves(request.target)) {
          rest.Handle(request, exchange);
        } else {
          service.Handle(request, exchange);
        }
      });
}

// What the OpenAI API's generations share with the gRPC services'.
performer::server::OpenAiServiceOptions OpenAiOptionsFor(
    const performer::server::ServiceOptions& services) {
  performer::server::OpenAiServiceOptions options;
  options.start.buffer_tokens = services.stream_buffer_tokens;
  options.start.tokens_per_message = services.stream_interval;
  options.start.tokens = services.tokens;
  options.start.max_priority_unprivileged = services.max_priority_unprivileged;
  options.start.security_observer = services.security_observer;
  options.start.peers = services.peers;
  options.observers = services.observers;
  return options;
}

int Run() {
  const sigset_t signals = BlockServingSignals();
  const GrpcLibrary grpc_library;
  const performer::server::LogConfig log = performer::server::LogConfigFromFlags();
  if (absl::Status s = performer::server::InitLogging(log.format, log.level); !s.ok()) {
    std::cerr << "performer-serve: " << s.message() << "\n";
    return 2;
  }
  StartupSignalWatcher startup_signals;
  absl::StatusOr<ServerConfig> config = performer::server::ServerConfigFromFlags();
  if (!config.ok()) return Fail(2, std::string(config.status().message()));
  absl::StatusOr<Credentials> credentials = LoadCredentials(*config);
  if (!credentials.ok()) return Fail(2, std::string(credentials.status().message()));
  const uint64_t open_files_limit = performer::server::RaiseOpenFileLimit();
  const performer::server::HeapReleaser heap_releaser(kHeapReleaseBurstBytes,
                                                      kHeapReleaseSettledBytes, absl::Seconds(1));
  ServerMetrics metrics(config->metrics.buckets);
  CredentialReloader reloader(&metrics);
  WatchCredentials(config->security, *credentials, reloader);
  absl::StatusOr<std::unique_ptr<prometheus::Exposer>> exposer =
      StartMetrics(config->metrics, credentials->metrics_token.get());
  if (!exposer.ok()) return Fail(1, std::string(exposer.status().message()));
  const int metrics_port = *exposer ? performer::server::MetricsEndpointPort(**exposer) : -1;

  ConfigureRuntime(*config, open_files_limit);
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      LoadModels(*config, *credentials, metrics);
  if (!repository.ok()) return Fail(1, repository.status().ToString());
  // Serving starts: from here SIGTERM drains.
  const int early_signal = startup_signals.Finish();

  performer::server::RequestLog request_log;
  const performer::server::ServiceOptions service_options =
      ServiceOptionsFor(*config, *credentials, metrics, request_log);
  ExposeMetrics(metrics, **repository, config->liveness_stall, exposer->get());
  prometheus::Gauge& listeners_accepting = ListenersAcceptingGauge(metrics);
  GenerationService service(**repository, service_options);
  InferenceService inference_service(**repository, service_options, config->liveness_stall);
  absl::StatusOr<GrpcServer> grpc = StartGrpc(
      *config, *credentials, metrics, {&service, &inference_service}, service_options.observers);
  if (!grpc.ok()) return Fail(1, std::string(grpc.status().message()));
  if (service_options.peers != nullptr) service_options.peers->SetSelfPort(grpc->port);
  performer::server::OpenAiService openai_service(**repository, OpenAiOptionsFor(service_options));
  performer::server::OpenInferenceRest inference_rest(**repository,
                                                      OpenAiOptionsFor(service_options));
  absl::StatusOr<std::unique_ptr<performer::server::HttpListener>> http =
      StartHttp(*config, *credentials, openai_service, inference_rest);
  if (!http.ok()) return Fail(1, std::string(http.status().message()));
  grpc::HealthCheckServiceInterface& health = *grpc->server->GetHealthCheckService();
  SetReadiness(health, **repository, true);
  health.SetServingStatus(kLivenessName, true);
  // The metrics port first, so that the gRPC port file alone signals
  // readiness.
  WritePortFile(config->metrics.port_file, metrics_port);
  if (*http) WritePortFile(config->http.port_file, (*http)->port());
  WritePortFile(config->grpc.port_file, grpc->port);

  int signal_number = 0;
  {
    const LivenessMonitor liveness(health, **repository, config->liveness_stall,
                                   ListeningPorts(*grpc), listeners_accepting);
    if (!reloader.empty()) {
      reloader.StartPolling(absl::Seconds(config->security.credentials_reload_seconds));
    }
    LogListening(*config, *credentials, *grpc, *http ? (*http)->port() : -1, metrics_port,
                 **repository);
    signal_number = WaitForTermination(signals, early_signal, reloader);
    LogEvent(level::info, "drain",
             {{"signal", signal_number},
              {"timeout_seconds", absl::ToDoubleSeconds(config->drain_timeout)}});
  }
  // Not ready from now on; liveness keeps its last value.
  SetReadiness(health, **repository, false);
  Drain(**repository, config->drain_timeout);
  grpc->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc->server->Wait();
  if (*http) (*http)->Stop();
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
    return absl::EndsWith(path, "server/server_config.cc");
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
