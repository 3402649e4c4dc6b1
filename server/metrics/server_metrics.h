// The server's Prometheus metrics (prometheus-cpp): the request families
// (fed by the service as an RpcObserver), the per-model engine families (fed
// by each engine as its EngineObserver), and collectors that read the
// engines' state and the process at scrape time. Names follow Prometheus
// conventions (prefix performer_, base units seconds and bytes); the table in
// the README lists them.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine/engine_observer.h"
#include "server/observer/rpc_observer.h"
#include "server/security/security_observer.h"

namespace performer::server {

class ModelRepository;

struct MetricBuckets {
  std::vector<double> request_seconds;  // request duration, queue time, TTFT
  std::vector<double> token_seconds;    // inter-token latency, engine steps, prefill
  std::vector<double> token_counts;     // prompt / generated tokens per request
  std::vector<double> batch_sizes;      // batch size and tokens per step
  static MetricBuckets Defaults();
};

// "0.001,0.01,0.1" -> buckets; INVALID_ARGUMENT naming `flag` unless they
// are finite and strictly increasing.
absl::StatusOr<std::vector<double>> ParseBuckets(const std::string& text, const std::string& flag);

class ServerMetrics : public RpcObserver, public SecurityObserver {
 public:
  explicit ServerMetrics(MetricBuckets buckets);
  ~ServerMetrics() override;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // The observer an engine reports to (created before the engine; owned
  // here). Labels its series with the model name.
  EngineObserver* ForModel(const std::string& model);
  // Registers what is known once the models are loaded: model info and load
  // time, and the collector of engine gauges (read from `repository` at
  // scrape time; it must outlive the registry's use). `stall` is the
  // liveness threshold behind performer_engine_healthy.
  void AddRepository(const ModelRepository& repository, absl::Duration stall);

  // What an exposer serves: the registry plus the scrape-time collectors.
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables() const;

  void OnRpcStart(std::string_view method) override;
  void OnRpcEnd(const RpcRecord& record) override;

  // Labelled with token names from the token file only (a bounded set).
  void OnAuthentication(std::string_view caller, std::string_view result) override;
  void OnPermissionDenied(std::string_view caller, Permission permission) override;
  void OnCredentialsReload(std::string_view credentials, bool ok) override;

 private:
  class ModelObserver;
  class EngineCollector;
  class ProcessCollector;

  const MetricBuckets buckets_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& queue_seconds_;
  prometheus::Family<prometheus::Histogram>& ttft_;
  prometheus::Family<prometheus::Histogram>& inter_token_;
  prometheus::Family<prometheus::Histogram>& prefill_;
  prometheus::Family<prometheus::Histogram>& prompt_tokens_hist_;
  prometheus::Family<prometheus::Histogram>& generated_tokens_hist_;
  prometheus::Family<prometheus::Counter>& prompt_tokens_;
  prometheus::Family<prometheus::Counter>& generated_tokens_;
  prometheus::Family<prometheus::Counter>& finished_;
  prometheus::Family<prometheus::Histogram>& batch_size_;
  prometheus::Family<prometheus::Histogram>& step_seconds_;
  prometheus::Family<prometheus::Histogram>& tokens_per_step_;
  prometheus::Family<prometheus::Gauge>& model_info_;
  prometheus::Family<prometheus::Gauge>& model_load_seconds_;
  prometheus::Family<prometheus::Counter>& auth_attempts_;
  prometheus::Family<prometheus::Counter>& permission_denied_;
  prometheus::Family<prometheus::Counter>& credentials_reloads_;

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<ModelObserver>> models_;
  std::shared_ptr<EngineCollector> engine_collector_;
  std::shared_ptr<ProcessCollector> process_collector_;
};

}  // namespace performer::server
