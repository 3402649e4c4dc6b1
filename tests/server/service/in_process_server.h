// A GenerationService and an InferenceService on an in-process grpc::Server
// (127.0.0.1, a port the kernel picks) over a ModelRepository loaded from the
// repository's default model folder (models/, see models/README.md), wired
// the way server/serve_main.cc wires them, and the client side the tests
// need: stubs, and client contexts that always carry a deadline so that no
// call of a test can wait forever.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "inference/grpc_service.grpc.pb.h"
#include "performer/v1/generation.grpc.pb.h"
#include "server/repository/model_repository.h"
#include "server/service/generation_service.h"
#include "server/service/inference_service.h"
#include "server/service/unparsable_request.h"
#include "tests/testing/fixtures.h"

namespace performer::server::in_process {

// The model of models/ that performer-serve serves by default.
inline constexpr char kDefaultModel[] = "performer-fortunes";

class InProcessServer {
 public:
  // Loads `repository_dir` with `repository_options`, then serves it with a
  // GenerationService made with `service_options`.
  // `credentials` (default plaintext) guard the port.
  static absl::StatusOr<std::unique_ptr<InProcessServer>> Start(
      const RepositoryOptions& repository_options, ServiceOptions service_options,
      const std::string& repository_dir = performer::testing::RepositoryModelsRoot(),
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr) {
    absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
        ModelRepository::Load(repository_dir, repository_options);
    if (!repository.ok()) return repository.status();
    return Serve(*std::move(repository), std::move(service_options), std::move(credentials));
  }

  // Serves `repository` (e.g. ModelRepository::FromModels of models a test
  // built) with a GenerationService made with `service_options`.
  static absl::StatusOr<std::unique_ptr<InProcessServer>> Serve(
      std::unique_ptr<ModelRepository> repository, ServiceOptions service_options,
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr) {
    std::unique_ptr<InProcessServer> out(new InProcessServer());
    out->repository_ = std::move(repository);
    out->service_ = std::make_unique<GenerationService>(*out->repository_, service_options);
    out->inference_service_ = std::make_unique<InferenceService>(
        *out->repository_, service_options, /*liveness_stall=*/absl::Seconds(30));
    grpc::ServerBuilder builder;
    builder.AddListeningPort(
        "127.0.0.1:0", credentials ? credentials : grpc::InsecureServerCredentials(), &out->port_);
    builder.RegisterService(out->service_.get());
    builder.RegisterService(out->inference_service_.get());
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(
        std::make_unique<UnparsableRequestInterceptorFactory>(service_options.observers));
    builder.experimental().SetInterceptorCreators(std::move(creators));
    out->server_ = builder.BuildAndStart();
    if (out->server_ == nullptr || out->port_ == 0) {
      out->repository_->Stop();
      return absl::UnavailableError("could not listen on 127.0.0.1");
    }
    return out;
  }

  // Drains and stops as server/main.cc does, each wait bounded.
  ~InProcessServer() {
    repository_->BeginDrain();
    repository_->WaitIdle(absl::Seconds(10));
    repository_->Stop();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }

  InProcessServer(const InProcessServer&) = delete;
  InProcessServer& operator=(const InProcessServer&) = delete;

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  ModelRepository& repository() { return *repository_; }

  std::unique_ptr<v1::Generation::Stub> NewStub() const {
    return v1::Generation::NewStub(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<inference::GRPCInferenceService::Stub> NewInferenceStub() const {
    return inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  }

 private:
  InProcessServer() = default;

  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<InferenceService> inference_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// The base of a test suite whose tests share one in-process server. The
// suite (`Suite`, the derived class) passes what InProcessServer::Start or
// Serve returned to Share() from its SetUpTestSuite; the server stops after
// the suite's last test (a suite with a TearDownTestSuite of its own calls
// this one first). A test of a suite whose server did not start fails at
// SetUp; otherwise SetUpClient() runs (stubs, for instance).
template <typename Suite>
class SharedServerTest : public ::testing::Test {
 protected:
  static void Share(absl::StatusOr<std::unique_ptr<InProcessServer>> started) {
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the in-process server did not start";
    SetUpClient();
  }
  virtual void SetUpClient() {}

  static inline InProcessServer* server_ = nullptr;
};

// A client context whose call ends, whatever the server does, `seconds`
// from now.
inline std::unique_ptr<grpc::ClientContext> ContextWithDeadline(int seconds = 30) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return context;
}

// A greedy request for the default model: the prompt's bytes as token ids
// (the model's tokenizer is the byte tokenizer).
inline v1::GenerateRequest GreedyRequest(const std::string& prompt, int max_new_tokens) {
  v1::GenerateRequest request;
  request.set_model(kDefaultModel);
  for (unsigned char byte : prompt) request.mutable_prompt_tokens()->add_ids(byte);
  request.set_max_new_tokens(max_new_tokens);
  request.set_temperature(0.0f);
  return request;
}

}  // namespace performer::server::in_process
