// A model that fails does not take the server down: over real gRPC, a
// decoder that throws in a step fails the request of that step with
// INTERNAL and the model's message, and the same server then serves the
// next requests, and answers ListModels, as before.
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "server/engine/engine.h"
#include "server/repository/model_repository.h"
#include "tests/server/engine/fake_sequence_decoder.h"
#include "tests/server/service/in_process_server.h"

namespace performer::server {
namespace {

using in_process::ContextWithDeadline;
using in_process::InProcessServer;

constexpr int64_t kVocab = 16;

std::unique_ptr<InProcessServer> ServeFake(fake::FakeFailure failure, const char* kind,
                                           int64_t nth) {
  auto decoder = std::make_unique<fake::FakeSequenceDecoder>(kVocab, /*capacity=*/4);
  decoder->FailAt(kind, nth, failure);
  auto model = std::make_unique<HostedModel>();
  model->name = "fake";
  model->kind = ModelKind::kDecoder;
  model->vocab_size = kVocab;
  model->max_sequence_length = decoder->info().max_seq_len;
  model->engine = std::make_unique<Engine>("fake", std::move(decoder), nullptr, EngineOptions{});
  std::vector<std::unique_ptr<HostedModel>> models;
  models.push_back(std::move(model));
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::FromModels(std::move(models));
  EXPECT_TRUE(repository.ok()) << repository.status();
  absl::StatusOr<std::unique_ptr<InProcessServer>> server =
      InProcessServer::Serve(*std::move(repository), ServiceOptions{});
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

v1::GenerateRequest Request(int max_new_tokens) {
  v1::GenerateRequest request;
  request.set_model("fake");
  request.mutable_prompt_tokens()->add_ids(1);
  request.mutable_prompt_tokens()->add_ids(2);
  request.set_max_new_tokens(max_new_tokens);
  request.set_temperature(0.0f);
  return request;
}

TEST(ErrorBoundaryTest, AThrowingStepFailsItsRequestAndTheServerServesOn) {
  std::unique_ptr<InProcessServer> server = ServeFake(fake::FakeFailure::kThrow, "step", 2);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::Generation::Stub> stub = server->NewStub();
  v1::GenerateResponse failed;
  grpc::Status status = stub->Generate(ContextWithDeadline().get(), Request(8), &failed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL) << status.error_message();
  EXPECT_NE(status.error_message().find("fake step threw"), std::string::npos)
      << status.error_message();
  for (int i = 0; i < 3; ++i) {
    v1::GenerateResponse ok;
    status = stub->Generate(ContextWithDeadline().get(), Request(4), &ok);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(std::vector<int32_t>(ok.token_ids().begin(), ok.token_ids().end()),
              (std::vector<int32_t>{3, 4, 5, 6}));
  }
  v1::ListModelsResponse models;
  EXPECT_TRUE(stub->ListModels(ContextWithDeadline().get(), v1::ListModelsRequest(), &models).ok());
  EXPECT_EQ(models.models_size(), 1);
}

TEST(ErrorBoundaryTest, OutOfMemoryInAPrefillIsResourceExhausted) {
  std::unique_ptr<InProcessServer> server =
      ServeFake(fake::FakeFailure::kOutOfMemory, "prefill", 1);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::Generation::Stub> stub = server->NewStub();
  v1::GenerateResponse response;
  grpc::Status status = stub->Generate(ContextWithDeadline().get(), Request(4), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  status = stub->Generate(ContextWithDeadline().get(), Request(4), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace performer::server
