// The state-reuse API over real gRPC (an in-process server on 127.0.0.1
// over the repository's default model): Usage.cached_prompt_tokens, session
// turns, DeleteSession / ExportSession / ImportSession and their errors,
// sessions moved from peers. Every call carries a deadline.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/engine/engine.h"
#include "server/service/generation_service.h"
#include "server/service/session_peers.h"
#include "tests/server/service/in_process_server.h"
#include "tests/testing/loopback_socket.h"

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
  first.set_create_session(true);
  v1::GenerateResponse one;
  ASSERT_TRUE(Generate(first, &one).ok());
  EXPECT_EQ(one.session_position(), 28 + 10);

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
  // The turn's prompt counts the history, served from the state.
  EXPECT_EQ(original.usage().prompt_tokens(), 38 + 14);
  EXPECT_EQ(original.usage().cached_prompt_tokens(), 37);
  EXPECT_EQ(original.session_position(), 38 + 14 + 10);
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

TEST_F(SessionServiceTest, TheRoutingMetadataMustNameTheSession) {
  v1::GenerateRequest request = GreedyRequest("Hi", 2);
  request.set_session_id("routed");
  request.set_create_session(true);
  v1::GenerateResponse response;
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    context->AddMetadata("x-session-id", "another");
    const grpc::Status status = stub_->Generate(context.get(), request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("x-session-id"), std::string::npos)
        << status.error_message();
  }
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
  context->AddMetadata("x-session-id", "routed");
  const grpc::Status status = stub_->Generate(context.get(), request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(SessionServiceTest, TakeSessionChecksTheFingerprintAndMovesTheSession) {
  v1::GenerateRequest first = GreedyRequest("Knock knock.", 4);
  first.set_session_id("to-take");
  first.set_create_session(true);
  v1::GenerateResponse one;
  ASSERT_TRUE(Generate(first, &one).ok());
  v1::TakeSessionRequest take;
  take.set_session_id("to-take");
  take.set_fingerprint("performer-fortunes/other/weights");
  v1::SessionState state;
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    EXPECT_EQ(stub_->TakeSession(context.get(), take, &state).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  Engine& engine = *server_->repository().Find("")->engine;
  take.set_fingerprint(FingerprintText(engine.fingerprint()));
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    const grpc::Status status = stub_->TakeSession(context.get(), take, &state);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(state.tokens(), 12 + 4);
  EXPECT_FALSE(engine.HoldsSession("to-take"));
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  EXPECT_EQ(stub_->TakeSession(context.get(), take, &state).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// Two replicas, no shared folder: turn 2 on the replica that does not hold
// the session moves it from its peer and continues exactly; without peers
// it is NOT_FOUND, never a fresh session.
TEST_F(SessionServiceTest, ATurnOnAnotherReplicaMovesTheSessionFromItsPeer) {
  for (const char* id : {"moving", "staying"}) {
    v1::GenerateRequest first = GreedyRequest("Q: Where is the bathroom?\nA:", 10);
    first.set_session_id(id);
    first.set_create_session(true);
    v1::GenerateResponse one;
    ASSERT_TRUE(Generate(first, &one).ok());
  }
  RepositoryOptions options;
  options.max_batch = 4;
  options.engine.prefill_chunk_tokens = 32;
  absl::StatusOr<std::unique_ptr<InProcessServer>> lonely =
      InProcessServer::Start(options, ServiceOptions());
  ASSERT_TRUE(lonely.ok()) << lonely.status();
  v1::GenerateRequest next = GreedyRequest("\nQ: Thanks.\nA:", 10);
  next.set_session_id("moving");
  v1::GenerateResponse response;
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    const grpc::Status status = (*lonely)->NewStub()->Generate(context.get(), next, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(status.error_message().find("not held by this replica"), std::string::npos)
        << status.error_message();
  }

  SessionPeerOptions peer_options;
  peer_options.peers = {server_->address()};
  SessionPeers peers(peer_options);
  ServiceOptions with_peers;
  with_peers.peers = &peers;
  absl::StatusOr<std::unique_ptr<InProcessServer>> other =
      InProcessServer::Start(options, with_peers);
  ASSERT_TRUE(other.ok()) << other.status();
  peers.SetSelfPort(-1);
  v1::GenerateResponse moved;
  {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    const grpc::Status status = (*other)->NewStub()->Generate(context.get(), next, &moved);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  next.set_session_id("staying");
  v1::GenerateResponse stayed;
  ASSERT_TRUE(Generate(next, &stayed).ok());
  EXPECT_EQ(std::vector<int32_t>(moved.token_ids().begin(), moved.token_ids().end()),
            std::vector<int32_t>(stayed.token_ids().begin(), stayed.token_ids().end()));
  EXPECT_EQ(moved.session_position(), stayed.session_position());
  EXPECT_FALSE(server_->repository().Find("")->engine->HoldsSession("moving"));
  EXPECT_EQ((*other)->repository().Find("")->engine->Stats().sessions.moved_in, 1);
}

// A turn of a session held neither here, in the spill folder nor at a peer
// that answered: when a peer did not answer in time it may hold the
// session, so the turn is UNAVAILABLE (retry), never NOT_FOUND, which tells
// the client to start over; a peer that refuses connections is down and
// holds nothing in memory, so without a silent one the turn is NOT_FOUND,
// naming it.
TEST_F(SessionServiceTest, APeerThatDidNotAnswerMakesAMissRetryable) {
  const testing::LoopbackSocket silent(/*listening=*/true), down(/*listening=*/false);
  RepositoryOptions options;
  options.max_batch = 4;
  options.engine.prefill_chunk_tokens = 32;
  for (bool with_silent : {true, false}) {
    SCOPED_TRACE(with_silent ? "a silent peer and a down one" : "a down peer");
    SessionPeerOptions peer_options;
    peer_options.peers = {down.address()};
    if (with_silent) peer_options.peers.push_back(silent.address());
    peer_options.timeout = absl::Milliseconds(300);
    SessionPeers peers(peer_options);
    ServiceOptions with_peers;
    with_peers.peers = &peers;
    absl::StatusOr<std::unique_ptr<InProcessServer>> replica =
        InProcessServer::Start(options, with_peers);
    ASSERT_TRUE(replica.ok()) << replica.status();
    peers.SetSelfPort(-1);
    v1::GenerateRequest turn = GreedyRequest("\nQ: Thanks.\nA:", 4);
    turn.set_session_id("held-elsewhere");
    v1::GenerateResponse response;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    const grpc::Status status = (*replica)->NewStub()->Generate(context.get(), turn, &response);
    const std::string& message = status.error_message();
    EXPECT_NE(message.find(down.address()), std::string::npos) << message;
    if (with_silent) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << message;
      EXPECT_NE(message.find("did not answer in time"), std::string::npos) << message;
      EXPECT_NE(message.find(silent.address() + " (Deadline Exceeded)"), std::string::npos)
          << message;
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << message;
      EXPECT_NE(message.find("not held by this replica"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace performer::server
