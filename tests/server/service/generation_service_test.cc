// performer.v1.Generation end to end in one process: a GenerationService on
// a grpc::Server bound to 127.0.0.1 over the repository's default model
// (models/performer-fortunes), called through the generated stub. Every call
// carries a deadline.
#include "server/service/generation_service.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/models/model_folder.h"
#include "tests/server/service/in_process_server.h"
#include "tests/testing/fixtures.h"

namespace performer::server {
namespace {

using in_process::ContextWithDeadline;
using in_process::GreedyRequest;
using in_process::InProcessServer;
using in_process::kDefaultModel;

constexpr int kMaxBatch = 4;
// --max_new_tokens_limit's default: the options keep it.
constexpr int kMaxNewTokensLimit = 4096;
constexpr char kPrompt[] = "The meaning of life is";

class GenerationServiceTest : public in_process::SharedServerTest<GenerationServiceTest> {
 protected:
  static void SetUpTestSuite() {
    RepositoryOptions repository_options;
    repository_options.max_batch = kMaxBatch;
    // A short pause per engine step keeps a long stream running while the
    // cancellation test reaches it.
    repository_options.engine.step_delay = absl::Milliseconds(2);
    ServiceOptions service_options;
    Share(InProcessServer::Start(repository_options, service_options));
  }

  void SetUpClient() override { stub_ = server_->NewStub(); }

  // GenerateStream to its end: every message, then the status.
  struct StreamResult {
    std::vector<v1::GenerateResponse> messages;
    grpc::Status status;
    std::vector<int32_t> tokens() const {
      std::vector<int32_t> out;
      for (const auto& m : messages)
        out.insert(out.end(), m.token_ids().begin(), m.token_ids().end());
      return out;
    }
  };
  StreamResult Stream(const v1::GenerateRequest& request, int deadline_seconds = 60) {
    StreamResult out;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(deadline_seconds);
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->GenerateStream(context.get(), request);
    v1::GenerateResponse message;
    while (reader->Read(&message)) out.messages.push_back(message);
    out.status = reader->Finish();
    return out;
  }

  grpc::Status Unary(const v1::GenerateRequest& request, v1::GenerateResponse* response) {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    return stub_->Generate(context.get(), request, response);
  }

  std::unique_ptr<v1::Generation::Stub> stub_;
};

// Greedy decoding with full forwards of the model folder, token by token: the
// reference the server's recurrent decoding must reproduce. `margins` gets
// each step's gap between the two largest logits.
std::vector<int32_t> DirectGreedyDecode(const std::string& prompt, int new_tokens,
                                        std::vector<double>* margins) {
  absl::StatusOr<models::LoadedModel> loaded = models::LoadModelFolder(
      performer::testing::RepositoryModelsRoot() + "/" + std::string(kDefaultModel));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return {};
  torch::NoGradGuard no_grad;
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int i = 0; i < new_tokens; ++i) {
    const torch::Tensor tokens = torch::tensor(ids, torch::kLong).unsqueeze(0);
    const torch::Tensor last = loaded->lm->forward(tokens).select(1, -1).squeeze(0);
    const torch::Tensor top2 = std::get<0>(last.topk(2));
    margins->push_back((top2[0] - top2[1]).item<double>());
    const int64_t next = last.argmax().item<int64_t>();
    out.push_back(static_cast<int32_t>(next));
    ids.push_back(next);
  }
  return out;
}

TEST_F(GenerationServiceTest, ListModelsDescribesTheDefaultModel) {
  v1::ListModelsResponse list;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  const grpc::Status status = stub_->ListModels(context.get(), v1::ListModelsRequest(), &list);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(list.default_model(), kDefaultModel);
  ASSERT_EQ(list.models_size(), 1) << list.DebugString();
  const v1::ModelInfo& model = list.models(0);
  EXPECT_EQ(model.name(), kDefaultModel);
  EXPECT_EQ(model.kind(), v1::MODEL_KIND_DECODER);
  EXPECT_EQ(model.vocab_size(), 256);
  EXPECT_EQ(model.max_sequence_length(), 2048);
  EXPECT_EQ(model.tokenizer(), "byte");
  EXPECT_GT(model.state_bytes_per_sequence(), 0);
  EXPECT_EQ(model.max_sequences(), kMaxBatch);
  EXPECT_TRUE(model.ready());
}

TEST_F(GenerationServiceTest, GetModelByNameAndByDefault) {
  v1::ModelInfo by_name;
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    v1::GetModelRequest request;
    request.set_name(kDefaultModel);
    const grpc::Status status = stub_->GetModel(context.get(), request, &by_name);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(by_name.name(), kDefaultModel);
  EXPECT_EQ(by_name.kind(), v1::MODEL_KIND_DECODER);
  EXPECT_EQ(by_name.active_sequences(), 0);
  EXPECT_EQ(by_name.queued_requests(), 0);

  v1::ModelInfo by_default;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  const grpc::Status status = stub_->GetModel(context.get(), v1::GetModelRequest(), &by_default);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(by_default.name(), kDefaultModel);
}

TEST_F(GenerationServiceTest, GetModelOfAnUnknownNameIsNotFound) {
  v1::ModelInfo info;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  v1::GetModelRequest request;
  request.set_name("no-such-model");
  const grpc::Status status = stub_->GetModel(context.get(), request, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_NE(status.error_message().find("no-such-model"), std::string::npos)
      << status.error_message();
}

TEST_F(GenerationServiceTest, GreedyGenerateEqualsADirectDecodeAndRepeats) {
  constexpr int kNew = 12;
  v1::GenerateRequest request = GreedyRequest(kPrompt, kNew);
  request.set_request_id("greedy-unary");
  v1::GenerateResponse first;
  const grpc::Status status = Unary(request, &first);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(first.request_id(), "greedy-unary");
  ASSERT_EQ(first.token_ids_size(), kNew) << first.DebugString();
  EXPECT_EQ(first.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(first.usage().prompt_tokens(), static_cast<int>(std::string(kPrompt).size()));
  EXPECT_EQ(first.usage().generated_tokens(), kNew);
  // The byte tokenizer gives the text too (compared where it is ASCII: other
  // bytes may wait for the rest of their UTF-8 sequence).
  std::string ascii;
  for (int32_t id : first.token_ids()) ascii += static_cast<char>(id);
  if (std::all_of(ascii.begin(), ascii.end(), [](char c) { return (c & 0x80) == 0; })) {
    EXPECT_EQ(first.text(), ascii);
  }

  // Greedy is deterministic: the same request gives the same tokens.
  v1::GenerateResponse second;
  request.set_request_id("greedy-unary-again");
  ASSERT_TRUE(Unary(request, &second).ok());
  EXPECT_EQ(std::vector<int32_t>(second.token_ids().begin(), second.token_ids().end()),
            std::vector<int32_t>(first.token_ids().begin(), first.token_ids().end()));

  // And they are the model's greedy continuation, compared up to the first
  // step whose top two logits are too close for float32 rounding to decide.
  std::vector<double> margins;
  const std::vector<int32_t> direct = DirectGreedyDecode(kPrompt, kNew, &margins);
  ASSERT_EQ(direct.size(), static_cast<size_t>(kNew));
  int compared = 0;
  for (int i = 0; i < kNew && margins[i] > 1e-3; ++i, ++compared) {
    EXPECT_EQ(first.token_ids(i), direct[i]) << "token " << i;
  }
  EXPECT_GT(compared, 0) << "no step of the direct decode had a clear top token";
}

TEST_F(GenerationServiceTest, GenerateStreamSendsTokensInSeveralMessages) {
  constexpr int kNew = 12;
  v1::GenerateRequest request = GreedyRequest(kPrompt, kNew);
  request.set_request_id("greedy-stream");
  const StreamResult stream = Stream(request);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message();
  ASSERT_GT(stream.messages.size(), 1u) << "tokens should arrive as they are generated";
  for (size_t i = 0; i + 1 < stream.messages.size(); ++i) {
    EXPECT_EQ(stream.messages[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED) << "message " << i;
  }
  for (const auto& m : stream.messages) EXPECT_EQ(m.request_id(), "greedy-stream");
  const v1::GenerateResponse& last = stream.messages.back();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().generated_tokens(), kNew);
  EXPECT_EQ(stream.tokens().size(), static_cast<size_t>(kNew));

  // The stream and the unary call decode the same tokens.
  v1::GenerateResponse unary;
  request.set_request_id("greedy-stream-unary");
  ASSERT_TRUE(Unary(request, &unary).ok());
  EXPECT_EQ(stream.tokens(),
            std::vector<int32_t>(unary.token_ids().begin(), unary.token_ids().end()));
}

TEST_F(GenerationServiceTest, UnknownModelIsNotFound) {
  v1::GenerateRequest request = GreedyRequest(kPrompt, 4);
  request.set_model("no-such-model");
  v1::GenerateResponse response;
  const grpc::Status status = Unary(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_NE(status.error_message().find("model"), std::string::npos) << status.error_message();

  const StreamResult stream = Stream(request);
  EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(stream.messages.empty());
}

TEST_F(GenerationServiceTest, BadMaxNewTokensIsInvalidArgumentNamingTheField) {
  for (int bad : {-1, kMaxNewTokensLimit + 1}) {
    SCOPED_TRACE(bad);
    const v1::GenerateRequest request = GreedyRequest(kPrompt, bad);
    v1::GenerateResponse response;
    const grpc::Status status = Unary(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("max_new_tokens"), std::string::npos)
        << status.error_message();

    const StreamResult stream = Stream(request);
    EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(stream.status.error_message().find("max_new_tokens"), std::string::npos)
        << stream.status.error_message();
    EXPECT_TRUE(stream.messages.empty());
  }
  // The server still serves.
  v1::GenerateResponse good;
  ASSERT_TRUE(Unary(GreedyRequest(kPrompt, 2), &good).ok());
  EXPECT_EQ(good.token_ids_size(), 2);
}

TEST_F(GenerationServiceTest, CancelEndsARunningStream) {
  constexpr int kLong = 1000;
  v1::GenerateRequest request = GreedyRequest(kPrompt, kLong);
  request.set_request_id("cancel-me");
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(120);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->GenerateStream(context.get(), request);
  std::vector<v1::GenerateResponse> messages(1);
  ASSERT_TRUE(reader->Read(&messages[0])) << "no first message";

  v1::CancelRequest cancel;
  cancel.set_request_id("cancel-me");
  v1::CancelResponse cancelled;
  {
    std::unique_ptr<grpc::ClientContext> cancel_context = ContextWithDeadline();
    const grpc::Status status = stub_->Cancel(cancel_context.get(), cancel, &cancelled);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_TRUE(cancelled.cancelled());

  v1::GenerateResponse message;
  while (reader->Read(&message)) messages.push_back(message);
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(messages.back().finish_reason(), v1::FINISH_REASON_CANCELLED);
  int tokens = 0;
  for (const auto& m : messages) tokens += m.token_ids_size();
  EXPECT_LT(tokens, kLong);
  EXPECT_EQ(messages.back().usage().generated_tokens(), tokens);

  // The request is no longer live: a second Cancel finds nothing.
  v1::CancelResponse again;
  std::unique_ptr<grpc::ClientContext> again_context = ContextWithDeadline();
  ASSERT_TRUE(stub_->Cancel(again_context.get(), cancel, &again).ok());
  EXPECT_FALSE(again.cancelled());
}

TEST_F(GenerationServiceTest, CancelOfAnUnknownRequestCancelsNothing) {
  v1::CancelRequest cancel;
  cancel.set_request_id("never-sent");
  v1::CancelResponse response;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  const grpc::Status status = stub_->Cancel(context.get(), cancel, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(response.cancelled());

  // An empty id names no request.
  cancel.clear_request_id();
  std::unique_ptr<grpc::ClientContext> empty_context = ContextWithDeadline();
  const grpc::Status empty = stub_->Cancel(empty_context.get(), cancel, &response);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(empty.error_message().find("request_id"), std::string::npos) << empty.error_message();
}

}  // namespace
}  // namespace performer::server
