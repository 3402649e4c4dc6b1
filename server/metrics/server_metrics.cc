#include "server/metrics/server_metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/decoding/sequence_decoder.h"
#include "server/engine/engine.h"
#include "server/repository/model_repository.h"

namespace performer::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

ClientMetric Sample(double value, MetricType type, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

}  // namespace

MetricBuckets MetricBuckets::Defaults() {
  MetricBuckets b;
  // From a sub-millisecond queue wait on an idle server to a ten-minute
  // generation.
  b.request_seconds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                       1,      2.5,   5,      10,    30,   60,    120,  300, 600};
  // Per token and per step: tens of microseconds (a tiny model) to seconds.
  b.token_seconds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                     0.05,   0.1,     0.25,   0.5,   1,      2.5,   5};
  b.token_counts = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  b.batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  return b;
}

absl::StatusOr<std::vector<double>> ParseBuckets(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double value;
    if (!absl::SimpleAtod(piece, &value) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", piece, "\" is not a finite number"));
    }
    if (!out.empty() && value <= out.back()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": bucket bounds must be strictly increasing"));
    }
    out.push_back(value);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": no buckets"));
  return out;
}

// Per model: the engine's reports, into that model's series.
class ServerMetrics::ModelObserver : public EngineObserver {
 public:
  ModelObserver(ServerMetrics& m, const std::string& model)
      : metrics_(m),
        model_(model),
        queue_(m.queue_seconds_.Add({{"model", model}}, m.buckets_.request_seconds)),
        ttft_(m.ttft_.Add({{"model", model}}, m.buckets_.request_seconds)),
        inter_token_(m.inter_token_.Add({{"model", model}}, m.buckets_.token_seconds)),
        prefill_(m.prefill_.Add({{"model", model}}, m.buckets_.token_seconds)),
        prompt_hist_(m.prompt_tokens_hist_.Add({{"model", model}}, m.buckets_.token_counts)),
        generated_hist_(m.generated_tokens_hist_.Add({{"model", model}}, m.buckets_.token_counts)),
        prompt_total_(m.prompt_tokens_.Add({{"model", model}})),
        generated_total_(m.generated_tokens_.Add({{"model", model}})),
        batch_(m.batch_size_.Add({{"model", model}}, m.buckets_.batch_sizes)),
        prefill_step_(m.step_seconds_.Add({{"model", model}, {"phase", "prefill"}},
                                          m.buckets_.token_seconds)),
        decode_step_(
            m.step_seconds_.Add({{"model", model}, {"phase", "decode"}}, m.buckets_.token_seconds)),
        tokens_per_step_(m.tokens_per_step_.Add({{"model", model}}, m.buckets_.batch_sizes)) {}

  void OnStep(const EngineStepStats& stats) override {
    if (stats.prefills > 0) prefill_step_.Observe(stats.prefill_seconds);
    if (stats.batch_size > 0) {
      batch_.Observe(static_cast<double>(stats.batch_size));
      decode_step_.Observe(stats.decode_seconds);
    }
    tokens_per_step_.Observe(static_cast<double>(stats.tokens));
  }
  void OnInterTokenGap(double seconds) override { inter_token_.Observe(seconds); }
  void OnFinished(const StreamSummary& summary, double prefill_seconds) override {
    metrics_.finished_
        .Add({{"model", model_}, {"reason", std::string(FinishReasonName(summary.reason))}})
        .Increment();
    queue_.Observe(summary.queue_seconds);
    if (summary.generated_tokens > 0) ttft_.Observe(summary.time_to_first_token_seconds);
    if (prefill_seconds >= 0) prefill_.Observe(prefill_seconds);
    prompt_hist_.Observe(static_cast<double>(summary.prompt_tokens));
    generated_hist_.Observe(static_cast<double>(summary.generated_tokens));
    prompt_total_.Increment(static_cast<double>(summary.prompt_tokens));
    generated_total_.Increment(static_cast<double>(summary.generated_tokens));
  }

 private:
  ServerMetrics& metrics_;
  const std::string model_;
  prometheus::Histogram& queue_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& inter_token_;
  prometheus::Histogram& prefill_;
  prometheus::Histogram& prompt_hist_;
  prometheus::Histogram& generated_hist_;
  prometheus::Counter& prompt_total_;
  prometheus::Counter& generated_total_;
  prometheus::Histogram& batch_;
  prometheus::Histogram& prefill_step_;
  prometheus::Histogram& decode_step_;
  prometheus::Histogram& tokens_per_step_;
};

// Engine state read at scrape time, so the gauges are never stale.
namespace {

// The prefix-state cache's and the sessions' series, read from EngineStats.
// Entries of one name are one family, told apart by their extra label.
struct StateReuseMetric {
  const char* name;
  const char* help;
  MetricType type;
  int64_t (*value)(const EngineStats&);
  const char* label = nullptr;  // extra label name, or none
  const char* label_value = nullptr;
};
constexpr char kMovedHelp[] = "Sessions moved between replicas (TakeSession), by direction";
constexpr char kMissHelp[] =
    "Session turns refused because the session could not be continued here, by reason: "
    "not_held (not here, in the spill folder or at a peer), expired (TTL or memory budget), "
    "peer_unavailable (a peer holds it but could not hand it over now)";
const std::array<StateReuseMetric, 17> kStateReuseMetrics = {{
    {"performer_prefix_cache_queries_total", "Prompts looked up in the prefix-state cache",
     MetricType::Counter, [](const EngineStats& s) { return s.prefix_cache.queries; }},
    {"performer_prefix_cache_hits_total", "Prompts that resumed from a cached prefix state",
     MetricType::Counter, [](const EngineStats& s) { return s.prefix_cache.hits; }},
    {"performer_prefix_cache_cached_tokens_total",
     "Prompt tokens served from cached states instead of prefilled", MetricType::Counter,
     [](const EngineStats& s) { return s.prefix_cache.cached_tokens; }},
    {"performer_prefix_cache_evictions_total", "Prefix states evicted for the byte budget",
     MetricType::Counter, [](const EngineStats& s) { return s.prefix_cache.evictions; }},
    {"performer_prefix_cache_entries", "Prefix states in the cache", MetricType::Gauge,
     [](const EngineStats& s) { return s.prefix_cache.entries; }},
    {"performer_prefix_cache_bytes",
     "Memory of the prefix-state cache (on the model's device unless "
     "--prefix_cache_on_device=false)",
     MetricType::Gauge, [](const EngineStats& s) { return s.prefix_cache.bytes; }},
    {"performer_sessions", "Sessions held in memory", MetricType::Gauge,
     [](const EngineStats& s) { return s.sessions.sessions; }},
    {"performer_session_bytes", "Host memory of the sessions held in memory", MetricType::Gauge,
     [](const EngineStats& s) { return s.sessions.bytes; }},
    {"performer_sessions_spilled", "Sessions in the spill folder", MetricType::Gauge,
     [](const EngineStats& s) { return s.sessions.spilled_sessions; }},
    {"performer_session_spilled_bytes", "Bytes of the sessions in the spill folder",
     MetricType::Gauge, [](const EngineStats& s) { return s.sessions.spilled_bytes; }},
    {"performer_sessions_dropped_total",
     "Sessions dropped (idle past the TTL, or past the memory budget without a spill folder)",
     MetricType::Counter,
     [](const EngineStats& s) { return s.sessions.expired + s.sessions.evicted; }},
    {"performer_sessions_moved_total", kMovedHelp, MetricType::Counter,
     [](const EngineStats& s) { return s.sessions.moved_in; }, "direction", "in"},
    {"performer_sessions_moved_total", kMovedHelp, MetricType::Counter,
     [](const EngineStats& s) { return s.sessions.moved_out; }, "direction", "out"},
    {"performer_session_misses_total", kMissHelp, MetricType::Counter,
     [](const EngineStats& s) { return s.sessions.misses_not_held; }, "reason", "not_held"},
    {"performer_session_misses_total", kMissHelp, MetricType::Counter,
     [](const EngineStats& s) { return s.sessions.misses_expired; }, "reason", "expired"},
    {"performer_session_misses_total", kMissHelp, MetricType::Counter,
     [](const EngineStats& s) { return s.sessions.misses_peer_unavailable; }, "reason",
     "peer_unavailable"},
    {"performer_sessions_persisted_total", "Session files written after a turn (--session_persist)",
     MetricType::Counter, [](const EngineStats& s) { return s.sessions.persisted; }},
}};

// The index of the family of kStateReuseMetrics[i] in the collected list.
size_t ReuseFamilyIndex(size_t i) {
  size_t family = 0;
  for (size_t j = 1; j <= i; ++j) {
    if (std::string_view(kStateReuseMetrics[j].name) != kStateReuseMetrics[j - 1].name) ++family;
  }
  return family;
}

}  // namespace

class ServerMetrics::EngineCollector : public prometheus::Collectable {
 public:
  EngineCollector(const ModelRepository& repository, absl::Duration stall)
      : repository_(repository), stall_(stall) {}

  std::vector<MetricFamily> Collect() const override {
    MetricFamily active = Family("performer_engine_active_sequences",
                                 "Sequences holding a state slot", MetricType::Gauge);
    MetricFamily free =
        Family("performer_engine_free_slots", "State slots free", MetricType::Gauge);
    MetricFamily queued = Family("performer_engine_queued_requests",
                                 "Requests waiting for a state slot", MetricType::Gauge);
    MetricFamily used = Family("performer_engine_state_memory_used_bytes",
                               "Recurrent-state memory of the active sequences", MetricType::Gauge);
    MetricFamily capacity = Family("performer_engine_state_memory_capacity_bytes",
                                   "Recurrent-state memory of all slots", MetricType::Gauge);
    // The inference gateway's "KV-cache utilization" (its endpoint picker's
    // --kv-cache-usage-percentage-metric): our cache is the slot pool.
    MetricFamily utilization =
        Family("performer_engine_state_memory_utilization",
               "Fraction of the state slots in use (0 to 1)", MetricType::Gauge);
    MetricFamily last_step =
        Family("performer_engine_last_step_timestamp_seconds",
               "Unix time the engine last completed an iteration with work (or work arrived)",
               MetricType::Gauge);
    MetricFamily healthy = Family(
        "performer_engine_healthy",
        "1 unless work waits or runs and the engine completed no step within the liveness window",
        MetricType::Gauge);
    MetricFamily weights = Family("performer_model_weight_bytes",
                                  "Bytes of the model's weights where it runs (parameters, "
                                  "buffers, decode copies), by decode weight dtype",
                                  MetricType::Gauge);
    std::vector<MetricFamily> reuse;
    for (size_t i = 0; i < kStateReuseMetrics.size(); ++i) {
      const StateReuseMetric& m = kStateReuseMetrics[i];
      if (ReuseFamilyIndex(i) == reuse.size()) reuse.push_back(Family(m.name, m.help, m.type));
    }
    for (const auto& model : repository_.models()) {
      if (!model->engine) continue;
      const EngineStats stats = model->engine->Stats();
      const double bytes = static_cast<double>(model->engine->info().state_bytes_per_sequence);
      const std::vector<ClientMetric::Label> labels = {{"model", model->name}};
      active.metric.push_back(Sample(static_cast<double>(stats.active), MetricType::Gauge, labels));
      free.metric.push_back(
          Sample(static_cast<double>(stats.capacity - stats.active), MetricType::Gauge, labels));
      queued.metric.push_back(Sample(static_cast<double>(stats.queued), MetricType::Gauge, labels));
      used.metric.push_back(
          Sample(bytes * static_cast<double>(stats.active), MetricType::Gauge, labels));
      capacity.metric.push_back(
          Sample(bytes * static_cast<double>(stats.capacity), MetricType::Gauge, labels));
      utilization.metric.push_back(
          Sample(stats.capacity > 0
                     ? static_cast<double>(stats.active) / static_cast<double>(stats.capacity)
                     : 0.0,
                 MetricType::Gauge, labels));
      last_step.metric.push_back(
          Sample(absl::ToDoubleSeconds(model->engine->last_step_time() - absl::UnixEpoch()),
                 MetricType::Gauge, labels));
      healthy.metric.push_back(
          Sample(model->engine->Healthy(stall_) ? 1.0 : 0.0, MetricType::Gauge, labels));
      const decoding::DecoderInfo& info = model->engine->info();
      weights.metric.push_back(
          Sample(static_cast<double>(info.weight_bytes), MetricType::Gauge,
                 {{"model", model->name}, {"weight_dtype", info.weight_dtype}}));
      for (size_t i = 0; i < kStateReuseMetrics.size(); ++i) {
        const StateReuseMetric& m = kStateReuseMetrics[i];
        std::vector<ClientMetric::Label> with = labels;
        if (m.label != nullptr) with.push_back({m.label, m.label_value});
        reuse[ReuseFamilyIndex(i)].metric.push_back(
            Sample(static_cast<double>(m.value(stats)), m.type, with));
      }
    }
    std::vector<MetricFamily> out = {active,      free,      queued,  used,   capacity,
                                     utilization, last_step, healthy, weights};
    out.insert(out.end(), reuse.begin(), reuse.end());
    return out;
  }

 private:
  const ModelRepository& repository_;
  const absl::Duration stall_;
};

// The standard process_* metrics, from /proc (Linux).
class ServerMetrics::ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out;
    const long ticks = sysconf(_SC_CLK_TCK);
    const long page = sysconf(_SC_PAGESIZE);
    std::ifstream stat_file("/proc/self/stat");
    std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    // Fields after the parenthesised command name (which may hold spaces).
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && ticks > 0) {
      std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
      // f[0] is field 3 (state): utime 14, stime 15, starttime 22, vsize 23, rss 24.
      auto field = [&](int n) {
        double v = 0;
        if (static_cast<size_t>(n - 3) < f.size()) (void)absl::SimpleAtod(f[n - 3], &v);
        return v;
      };
      out.push_back(Family("process_cpu_seconds_total",
                           "Total user and system CPU time spent in seconds.",
                           MetricType::Counter));
      out.back().metric.push_back(
          Sample((field(14) + field(15)) / static_cast<double>(ticks), MetricType::Counter));
      out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                           MetricType::Gauge));
      out.back().metric.push_back(Sample(field(23), MetricType::Gauge));
      out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                           MetricType::Gauge));
      out.back().metric.push_back(Sample(field(24) * static_cast<double>(page), MetricType::Gauge));
      const double boot = BootTime();
      if (boot > 0) {
        out.push_back(Family("process_start_time_seconds",
                             "Start time of the process since unix epoch in seconds.",
                             MetricType::Gauge));
        out.back().metric.push_back(
            Sample(boot + field(22) / static_cast<double>(ticks), MetricType::Gauge));
      }
    }
    std::error_code error;
    double fds = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", error);
         !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
      ++fds;
    }
    out.push_back(
        Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge));
    out.back().metric.push_back(Sample(fds, MetricType::Gauge));
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      out.push_back(
          Family("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge));
      out.back().metric.push_back(Sample(static_cast<double>(limit.rlim_cur), MetricType::Gauge));
    }
    return out;
  }

 private:
  static double BootTime() {
    std::ifstream in("/proc/stat");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("btime ", 0) == 0) {
        double v = 0;
        (void)absl::SimpleAtod(line.substr(6), &v);
        return v;
      }
    }
    return 0;
  }
};

ServerMetrics::ServerMetrics(MetricBuckets buckets)
    : buckets_(std::move(buckets)),
      registry_(std::make_shared<prometheus::Registry>()),
      requests_(BuildCounter()
                    .Name("performer_requests_total")
                    .Help("RPCs completed, by model, method, protocol and gRPC status code")
                    .Register(*registry_)),
      in_flight_(BuildGauge()
                     .Name("performer_requests_in_flight")
                     .Help("RPCs started and not yet completed, by method")
                     .Register(*registry_)),
      request_duration_(BuildHistogram()
                            .Name("performer_request_duration_seconds")
                            .Help("RPC duration from its start to its end")
                            .Register(*registry_)),
      queue_seconds_(BuildHistogram()
                         .Name("performer_request_queue_seconds")
                         .Help("Time a generation waited for a state slot")
                         .Register(*registry_)),
      ttft_(BuildHistogram()
                .Name("performer_time_to_first_token_seconds")
                .Help("Time from a generation's arrival to its first token")
                .Register(*registry_)),
      inter_token_(BuildHistogram()
                       .Name("performer_inter_token_latency_seconds")
                       .Help("Time between consecutive tokens of a generation")
                       .Register(*registry_)),
      prefill_(BuildHistogram()
                   .Name("performer_prefill_duration_seconds")
                   .Help("Model time spent prefilling a generation's prompt")
                   .Register(*registry_)),
      prompt_tokens_hist_(BuildHistogram()
                              .Name("performer_request_prompt_tokens")
                              .Help("Prompt tokens per generation (decoder prompt + source)")
                              .Register(*registry_)),
      generated_tokens_hist_(BuildHistogram()
                                 .Name("performer_request_generated_tokens")
                                 .Help("Tokens generated per generation")
                                 .Register(*registry_)),
      prompt_tokens_(BuildCounter()
                         .Name("performer_prompt_tokens_total")
                         .Help("Prompt tokens of finished generations")
                         .Register(*registry_)),
      generated_tokens_(BuildCounter()
                            .Name("performer_generated_tokens_total")
                            .Help("Tokens generated by finished generations")
                            .Register(*registry_)),
      finished_(BuildCounter()
                    .Name("performer_requests_finished_total")
                    .Help("Generations finished, by finish reason")
                    .Register(*registry_)),
      batch_size_(BuildHistogram()
                      .Name("performer_engine_batch_size")
                      .Help("Sequences in each decode step")
                      .Register(*registry_)),
      step_seconds_(BuildHistogram()
                        .Name("performer_engine_step_duration_seconds")
                        .Help("Engine work per iteration, by phase (prefill or decode)")
                        .Register(*registry_)),
      tokens_per_step_(BuildHistogram()
                           .Name("performer_engine_tokens_per_step")
                           .Help("Tokens emitted per engine iteration")
                           .Register(*registry_)),
      model_info_(BuildGauge()
                      .Name("performer_model_info")
                      .Help("A hosted model (always 1): kind, vocabulary, max length, state size")
                      .Register(*registry_)),
      model_load_seconds_(BuildGauge()
                              .Name("performer_model_load_seconds")
                              .Help("Time to load and warm up a model")
                              .Register(*registry_)),
      auth_attempts_(BuildCounter()
                         .Name("performer_auth_attempts_total")
                         .Help("Calls checked for a bearer token, by caller (the token's name) "
                               "and result: ok, missing or invalid")
                         .Register(*registry_)),
      permission_denied_(BuildCounter()
                             .Name("performer_permission_denied_total")
                             .Help("Authenticated calls refused for lack of a permission, by "
                                   "caller and permission")
                             .Register(*registry_)),
      credentials_reloads_(BuildCounter()
                               .Name("performer_credentials_reloads_total")
                               .Help("Reloads of the token files and TLS certificates, by "
                                     "credentials and result (ok, error)")
                               .Register(*registry_)),
      process_collector_(std::make_shared<ProcessCollector>()) {}

ServerMetrics::~ServerMetrics() = default;

EngineObserver* ServerMetrics::ForModel(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = models_[model];
  if (!slot) slot = std::make_unique<ModelObserver>(*this, model);
  return slot.get();
}

void ServerMetrics::AddRepository(const ModelRepository& repository, absl::Duration stall) {
  for (const auto& model : repository.models()) {
    const int64_t state_bytes = model->engine ? model->engine->info().state_bytes_per_sequence : 0;
    model_info_
        .Add({{"model", model->name},
              {"kind", std::string(ModelKindName(model->kind))},
              {"vocab_size", std::to_string(model->vocab_size)},
              {"max_sequence_length", std::to_string(model->max_sequence_length)},
              {"state_bytes_per_sequence", std::to_string(state_bytes)}})
        .Set(1);
    model_load_seconds_.Add({{"model", model->name}}).Set(model->load_seconds);
  }
  engine_collector_ = std::make_shared<EngineCollector>(repository, stall);
}

std::vector<std::weak_ptr<prometheus::Collectable>> ServerMetrics::collectables() const {
  std::vector<std::weak_ptr<prometheus::Collectable>> out = {registry_, process_collector_};
  if (engine_collector_) out.push_back(engine_collector_);
  return out;
}

void ServerMetrics::OnRpcStart(std::string_view method) {
  in_flight_.Add({{"method", std::string(method)}}).Increment();
}

void ServerMetrics::OnRpcEnd(const RpcRecord& record) {
  const std::string method(record.method);
  in_flight_.Add({{"method", method}}).Decrement();
  requests_
      .Add({{"model", record.model},
            {"method", method},
            {"protocol", std::string(record.protocol)},
            {"code", absl::StatusCodeToString(record.status.code())}})
      .Increment();
  request_duration_.Add({{"model", record.model}, {"method", method}}, buckets_.request_seconds)
      .Observe(record.seconds);
}

void ServerMetrics::OnAuthentication(std::string_view caller, std::string_view result) {
  auth_attempts_.Add({{"caller", std::string(caller)}, {"result", std::string(result)}})
      .Increment();
}

void ServerMetrics::OnPermissionDenied(std::string_view caller, Permission permission) {
  permission_denied_
      .Add({{"caller", std::string(caller)},
            {"permission", std::string(PermissionName(permission))}})
      .Increment();
}

void ServerMetrics::OnCredentialsReload(std::string_view credentials, bool ok) {
  credentials_reloads_
      .Add({{"credentials", std::string(credentials)}, {"result", ok ? "ok" : "error"}})
      .Increment();
}

}  // namespace performer::server
