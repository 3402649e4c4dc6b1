// ServerMetrics wired as server/serve_main.cc wires it (the service's RpcObserver,
// each engine's EngineObserver, the repository's scrape-time collector) on
// an in-process server over models/: requests move the counters of the
// Prometheus text exposition as they should.
#include "server/metrics/server_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "tests/server/service/in_process_server.h"

namespace performer::server {
namespace {

using in_process::ContextWithDeadline;
using in_process::GreedyRequest;
using in_process::InProcessServer;
using in_process::kDefaultModel;

// One sample of the text exposition: name, labels, value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the Prometheus text format as prometheus-cpp writes it (label
// values quoted, with \\, \" and \n escapes).
std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample sample;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos) continue;
    sample.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') break;
        const std::string key = line.substr(i, eq - i);
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        sample.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    const size_t start = line.find_first_not_of(' ', i);
    const size_t end = line.find(' ', start);
    if (start == std::string::npos) continue;
    if (!absl::SimpleAtod(line.substr(start, end - start), &sample.value)) continue;
    out.push_back(std::move(sample));
  }
  return out;
}

class ServerMetricsTest : public in_process::SharedServerTest<ServerMetricsTest> {
 protected:
  static void SetUpTestSuite() {
    metrics_ = new ServerMetrics(MetricBuckets::Defaults());
    RepositoryOptions repository_options;
    repository_options.max_batch = 4;
    repository_options.observer_for_model = [](const std::string& model) {
      return metrics_->ForModel(model);
    };
    ServiceOptions service_options;
    service_options.observers.push_back(metrics_);
    Share(InProcessServer::Start(repository_options, service_options));
    if (server_ == nullptr) return;  // Share failed the suite
    metrics_->AddRepository(server_->repository(), absl::Seconds(30));
  }

  static void TearDownTestSuite() {
    SharedServerTest::TearDownTestSuite();  // the engines report to metrics_ until they stop
    delete metrics_;
    metrics_ = nullptr;
  }

  void SetUpClient() override { stub_ = server_->NewStub(); }

  // What an exposer would serve now.
  static std::string Exposition() {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& weak : metrics_->collectables()) {
      if (auto collectable = weak.lock()) {
        for (auto& family : collectable->Collect()) families.push_back(std::move(family));
      }
    }
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    return out.str();
  }

  // The sum of the samples called `name` whose labels include `labels`
  // (0 when there is none).
  static double Value(const std::vector<Sample>& samples, const std::string& name,
                      const std::map<std::string, std::string>& labels = {}) {
    double sum = 0;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [key, value] : labels) {
        auto it = s.labels.find(key);
        match = match && it != s.labels.end() && it->second == value;
      }
      if (match) sum += s.value;
    }
    return sum;
  }

  // Scrapes until `done` holds for the samples, at most `timeout`: the
  // observers hear of a call's end after the client has its answer. Returns
  // the last scrape.
  static std::vector<Sample> ScrapeUntil(
      const std::function<bool(const std::vector<Sample>&)>& done,
      std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<Sample> samples = ParseExposition(Exposition());
    while (!done(samples) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      samples = ParseExposition(Exposition());
    }
    return samples;
  }

  static ServerMetrics* metrics_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

ServerMetrics* ServerMetricsTest::metrics_ = nullptr;

constexpr std::chrono::seconds kSettle(10);

TEST_F(ServerMetricsTest, ExpositionDescribesTheModelAndItsEngine) {
  const std::vector<Sample> samples = ParseExposition(Exposition());
  const std::map<std::string, std::string> model = {{"model", kDefaultModel}};
  EXPECT_EQ(Value(samples, "performer_model_info",
                  {{"model", kDefaultModel}, {"kind", "decoder"}, {"vocab_size", "256"}}),
            1);
  EXPECT_GT(Value(samples, "performer_model_load_seconds", model), 0);
  EXPECT_EQ(Value(samples, "performer_engine_active_sequences", model), 0);
  EXPECT_EQ(Value(samples, "performer_engine_free_slots", model), 4);
  EXPECT_EQ(Value(samples, "performer_engine_queued_requests", model), 0);
  EXPECT_GT(Value(samples, "performer_engine_state_memory_capacity_bytes", model), 0);
  EXPECT_EQ(Value(samples, "performer_engine_state_memory_utilization", model), 0);
  EXPECT_EQ(Value(samples, "performer_engine_healthy", model), 1);
  EXPECT_GT(Value(samples, "process_resident_memory_bytes"), 0);
}

TEST_F(ServerMetricsTest, AGenerationMovesTheRequestAndTokenCounters) {
  const std::map<std::string, std::string> model = {{"model", kDefaultModel}};
  const std::map<std::string, std::string> unary_ok = {
      {"model", kDefaultModel}, {"method", "Generate"}, {"protocol", "performer"}, {"code", "OK"}};
  const std::map<std::string, std::string> length = {{"model", kDefaultModel},
                                                     {"reason", "length"}};
  const std::vector<Sample> before = ParseExposition(Exposition());

  constexpr int kNew = 6;
  const std::string prompt = "Hello, world";
  v1::GenerateResponse response;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  const grpc::Status status =
      stub_->Generate(context.get(), GreedyRequest(prompt, kNew), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.token_ids_size(), kNew);

  auto counted = [&](const std::vector<Sample>& s) {
    return Value(s, "performer_requests_total", unary_ok) ==
               Value(before, "performer_requests_total", unary_ok) + 1 &&
           Value(s, "performer_requests_finished_total", length) ==
               Value(before, "performer_requests_finished_total", length) + 1;
  };
  const std::vector<Sample> after = ScrapeUntil(counted, kSettle);
  auto delta = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
    return Value(after, name, labels) - Value(before, name, labels);
  };
  EXPECT_EQ(delta("performer_requests_total", unary_ok), 1);
  EXPECT_EQ(delta("performer_requests_finished_total", length), 1);
  EXPECT_EQ(delta("performer_prompt_tokens_total", model), static_cast<double>(prompt.size()));
  EXPECT_EQ(delta("performer_generated_tokens_total", model), kNew);
  EXPECT_EQ(delta("performer_request_duration_seconds_count",
                  {{"model", kDefaultModel}, {"method", "Generate"}}),
            1);
  EXPECT_EQ(delta("performer_time_to_first_token_seconds_count", model), 1);
  EXPECT_EQ(delta("performer_request_queue_seconds_count", model), 1);
  EXPECT_EQ(delta("performer_request_generated_tokens_sum", model), kNew);
  EXPECT_EQ(delta("performer_request_prompt_tokens_sum", model),
            static_cast<double>(prompt.size()));
  // The first token comes from the prefill; each later one from a decode step.
  EXPECT_EQ(delta("performer_inter_token_latency_seconds_count", model), kNew - 1);
  EXPECT_GE(delta("performer_engine_step_duration_seconds_count",
                  {{"model", kDefaultModel}, {"phase", "decode"}}),
            kNew - 1);
  EXPECT_GE(delta("performer_engine_step_duration_seconds_count",
                  {{"model", kDefaultModel}, {"phase", "prefill"}}),
            1);
  EXPECT_EQ(Value(after, "performer_requests_in_flight", {{"method", "Generate"}}), 0);
  EXPECT_EQ(Value(after, "performer_engine_active_sequences", model), 0);
}

TEST_F(ServerMetricsTest, AStreamAndAnErrorAreCountedByMethodAndCode) {
  const std::map<std::string, std::string> stream_ok = {
      {"model", kDefaultModel}, {"method", "GenerateStream"}, {"code", "OK"}};
  const std::map<std::string, std::string> not_found = {{"method", "Generate"},
                                                        {"code", "NOT_FOUND"}};
  const std::map<std::string, std::string> invalid = {{"method", "GenerateStream"},
                                                      {"code", "INVALID_ARGUMENT"}};
  const std::vector<Sample> before = ParseExposition(Exposition());

  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    auto reader = stub_->GenerateStream(context.get(), GreedyRequest("Stream", 4));
    v1::GenerateResponse message;
    int tokens = 0;
    while (reader->Read(&message)) tokens += message.token_ids_size();
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(tokens, 4);
  }
  {
    v1::GenerateRequest request = GreedyRequest("Nobody", 4);
    request.set_model("no-such-model");
    v1::GenerateResponse response;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    EXPECT_EQ(stub_->Generate(context.get(), request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    auto reader = stub_->GenerateStream(context.get(), GreedyRequest("Bad", -1));
    v1::GenerateResponse message;
    while (reader->Read(&message)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }

  auto counted = [&](const std::vector<Sample>& s) {
    for (const auto* labels : {&stream_ok, &not_found, &invalid}) {
      if (Value(s, "performer_requests_total", *labels) !=
          Value(before, "performer_requests_total", *labels) + 1) {
        return false;
      }
    }
    return true;
  };
  const std::vector<Sample> after = ScrapeUntil(counted, kSettle);
  for (const auto* labels : {&stream_ok, &not_found, &invalid}) {
    EXPECT_EQ(Value(after, "performer_requests_total", *labels) -
                  Value(before, "performer_requests_total", *labels),
              1)
        << labels->at("method") << " " << labels->at("code");
  }
  // Refused requests never reach the engine: one generation finished.
  EXPECT_EQ(Value(after, "performer_requests_finished_total", {{"model", kDefaultModel}}) -
                Value(before, "performer_requests_finished_total", {{"model", kDefaultModel}}),
            1);
  EXPECT_EQ(Value(after, "performer_generated_tokens_total", {{"model", kDefaultModel}}) -
                Value(before, "performer_generated_tokens_total", {{"model", kDefaultModel}}),
            4);
  for (const char* method : {"Generate", "GenerateStream"}) {
    EXPECT_EQ(Value(after, "performer_requests_in_flight", {{"method", method}}), 0) << method;
  }
}

TEST_F(ServerMetricsTest, OpenInferenceProtocolRequestsAreCountedUnderTheirProtocol) {
  const std::map<std::string, std::string> infer_ok = {{"model", kDefaultModel},
                                                       {"method", "ModelInfer"},
                                                       {"protocol", "kserve_v2"},
                                                       {"code", "OK"}};
  const std::map<std::string, std::string> infer_not_found = {
      {"method", "ModelInfer"}, {"protocol", "kserve_v2"}, {"code", "NOT_FOUND"}};
  const std::map<std::string, std::string> performer_infer = {{"method", "ModelInfer"},
                                                              {"protocol", "performer"}};
  const std::vector<Sample> before = ParseExposition(Exposition());

  std::unique_ptr<inference::GRPCInferenceService::Stub> stub = server_->NewInferenceStub();
  inference::ModelInferRequest request;
  request.set_model_name(kDefaultModel);
  auto* input = request.add_inputs();
  input->set_name("text_input");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents("Counted");
  (*request.mutable_parameters())["max_tokens"].set_int64_param(3);
  (*request.mutable_parameters())["ignore_eos"].set_bool_param(true);
  {
    inference::ModelInferResponse response;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    const grpc::Status status = stub->ModelInfer(context.get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  request.set_model_name("no-such-model");
  {
    inference::ModelInferResponse response;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    EXPECT_EQ(stub->ModelInfer(context.get(), request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }

  auto counted = [&](const std::vector<Sample>& s) {
    return Value(s, "performer_requests_total", infer_ok) ==
               Value(before, "performer_requests_total", infer_ok) + 1 &&
           Value(s, "performer_requests_total", infer_not_found) ==
               Value(before, "performer_requests_total", infer_not_found) + 1;
  };
  const std::vector<Sample> after = ScrapeUntil(counted, kSettle);
  EXPECT_EQ(Value(after, "performer_requests_total", infer_ok) -
                Value(before, "performer_requests_total", infer_ok),
            1);
  EXPECT_EQ(Value(after, "performer_requests_total", infer_not_found) -
                Value(before, "performer_requests_total", infer_not_found),
            1);
  EXPECT_EQ(Value(after, "performer_requests_total", performer_infer), 0);
  // The generation itself is the engine's, counted as any other.
  EXPECT_EQ(Value(after, "performer_generated_tokens_total", {{"model", kDefaultModel}}) -
                Value(before, "performer_generated_tokens_total", {{"model", kDefaultModel}}),
            3);
  EXPECT_EQ(Value(after, "performer_requests_in_flight", {{"method", "ModelInfer"}}), 0);
}

}  // namespace
}  // namespace performer::server
