// The state-reuse API over real gRPC (an in-process server on 127.0.0.1
// over the repository's default model): Usage.cached_prompt_tokens, session
// turns, DeleteSession / ExportSession / ImportSession and their errors.
// Every call carries a deadline.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/service/generation_service.h"
#include "tests/server/service/in_process_server.h"

namespace performer::server {
namespace {

using in_process::ContextWithDeadline;
using in_process::GreedyRequest;
using in_process::InProcessServer;
using in_process::kDefaultModel;

class SessionServiceTest : public in_process::SharedServerTest<SessionServiceTest> {
 protected:
  static void SetUpTestSuite() {
    RepositoryOptions options;
    options.max_batch = 4;
    options.engine.prefill_chunk_tokens = 32;
    options.engine.prefix_cache.max_bytes = 64 << 20;
    options.engine.prefix_cache.interval_tokens = 32;
    Share(InProcessServer::Start(options, ServiceOptions()));
  }
  void SetUpClient() override { stub_ = server_->NewStub(); }

  grpc::Status Generate(const v1::GenerateRequest& request, v1::GenerateResponse* response) {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    return stub_->Generate(context.get(), request, response);
  }

  std::unique_ptr<v1::Generation::Stub> stub_;
};

TEST_F(SessionServiceTest, ARepeatedPromptReportsItsCachedTokens) {
  const std::string prompt(100, 'a');
  v1::GenerateResponse cold, warm;
  ASSERT_TRUE(Generate(GreedyRequest(prompt, 8), &cold).ok());
  ASSERT_TRUE(Generate(GreedyRequest(prompt, 8), &warm).ok());
  EXPECT_EQ(warm.usage().cached_prompt_tokens(), 100);
  EXPECT_EQ(warm.usage().prompt_tokens(), 100);
  EXPECT_EQ(std::vector<int32_t>(warm.token_ids().begin(), warm.token_ids().end()),
            std::vector<int32_t>(cold.token_ids().begin(), cold.token_ids().end()));
}

TEST_F(SessionServiceTest, TurnsExportImportAndDelete) {
  v1::GenerateRequest first = GreedyRequest("Q: Where is the bathroom?\nA:", 10);
  first.set_session_id("grpc-chat");
  v1::GenerateResponse one;
  ASSERT_TRUE(Generate(first, &one).ok());

  v1::ExportSessionRequest export_request;
  export_request.set_session_id("grpc-chat");
  v1::SessionState state;
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    const grpc::Status status = stub_->ExportSession(context.get(), export_request, &state);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(state.model(), kDefaultModel);
  EXPECT_EQ(state.tokens(), 28 + 10);
  EXPECT_EQ(state.position(), state.tokens() - 1);

  // A copy under another id answers the next turn as the original does.
  v1::ImportSessionRequest import_request;
  import_request.set_session_id("grpc-copy");
  import_request.set_data(state.data());
  v1::ImportSessionResponse imported;
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    ASSERT_TRUE(stub_->ImportSession(context.get(), import_request, &imported).ok());
  }
  EXPECT_EQ(imported.position(), state.position());
  v1::GenerateResponse original, copy;
  v1::GenerateRequest next = GreedyRequest("\nQ: Thanks.\nA:", 10);
  next.set_session_id("grpc-chat");
  ASSERT_TRUE(Generate(next, &original).ok());
  next.set_session_id("grpc-copy");
  ASSERT_TRUE(Generate(next, &copy).ok());
  EXPECT_EQ(std::vector<int32_t>(copy.token_ids().begin(), copy.token_ids().end()),
            std::vector<int32_t>(original.token_ids().begin(), original.token_ids().end()));

  v1::DeleteSessionRequest delete_request;
  delete_request.set_session_id("grpc-copy");
  v1::DeleteSessionResponse deleted;
  for (grpc::StatusCode expected : {grpc::StatusCode::OK, grpc::StatusCode::NOT_FOUND}) {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    EXPECT_EQ(stub_->DeleteSession(context.get(), delete_request, &deleted).error_code(), expected);
  }
}

TEST_F(SessionServiceTest, BadSessionRequestsGetClearErrors) {
  auto import_status = [&](const std::string& model, const std::string& id,
                           const std::string& data) {
    v1::ImportSessionRequest request;
    request.set_model(model);
    request.set_session_id(id);
    request.set_data(data);
    v1::ImportSessionResponse response;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    return stub_->ImportSession(context.get(), request, &response);
  };
  EXPECT_EQ(import_status("", "s", "garbage").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(import_status("", "", "garbage").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(import_status("nope", "s", "garbage").error_code(), grpc::StatusCode::NOT_FOUND);
  v1::ExportSessionRequest export_request;
  export_request.set_session_id("never-seen");
  v1::SessionState state;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  EXPECT_EQ(stub_->ExportSession(context.get(), export_request, &state).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::GenerateRequest long_id = GreedyRequest("Hi", 2);
  long_id.set_session_id(std::string(129, 'x'));
  v1::GenerateResponse response;
  const grpc::Status status = Generate(long_id, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("session_id"), std::string::npos) << status.error_message();
}

}  // namespace
}  // namespace performer::server
