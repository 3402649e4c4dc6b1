// The call gate and the caller's permissions, in one process: a
// GenerationService behind GatedServerCredentials with three tokens (alice
// and bob without permissions, root with admin), called through the stub
// with and without tokens. Every call carries a deadline.
#include "server/security/call_gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/server/service/in_process_server.h"

namespace performer::server {
namespace {

using in_process::ContextWithDeadline;
using in_process::GreedyRequest;
using in_process::InProcessServer;

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kBob[] = "bob-token-0123456789";
constexpr char kRoot[] = "root-token-0123456789";

std::unique_ptr<TokenAuthenticator> Tokens() {
  absl::StatusOr<std::vector<TokenEntry>> entries =
      ParseTokenFile(std::string(kAlice) + " alice\n" + kBob + " bob\n" + kRoot + " root admin\n");
  EXPECT_TRUE(entries.ok()) << entries.status();
  return std::make_unique<TokenAuthenticator>(entries.ok() ? *entries : std::vector<TokenEntry>{});
}

class CountingObserver : public SecurityObserver {
 public:
  void OnAuthentication(std::string_view caller, std::string_view result) override {
    ++results[std::string(result)];
  }
  void OnPermissionDenied(std::string_view caller, Permission permission) override {
    denied.push_back(std::string(caller) + ":" + std::string(PermissionName(permission)));
  }
  void OnCredentialsReload(std::string_view, bool) override {}
  std::map<std::string, int> results;
  std::vector<std::string> denied;
};

TEST(CheckCallTest, HealthIsOpenAndEverythingElseNeedsAToken) {
  std::unique_ptr<TokenAuthenticator> tokens = Tokens();
  CountingObserver observer;
  const CallGate gate{tokens.get(), /*health_only=*/false, &observer};
  EXPECT_TRUE(CheckCall(gate, "/grpc.health.v1.Health/Check", "").ok());
  EXPECT_TRUE(CheckCall(gate, "/grpc.health.v1.Health/Watch", "").ok());
  EXPECT_EQ(CheckCall(gate, "/performer.v1.Generation/ListModels", "").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckCall(gate, "/inference.GRPCInferenceService/ModelInfer", "Bearer nope-nope-nope-0")
                .code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(
      CheckCall(gate, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "").code(),
      absl::StatusCode::kUnauthenticated);
  // A look-alike of the health service is not it.
  EXPECT_EQ(CheckCall(gate, "/grpc.health.v1.HealthX/Check", "").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(
      CheckCall(gate, "/performer.v1.Generation/ListModels", std::string("Bearer ") + kAlice).ok());
  EXPECT_EQ(observer.results["ok"], 1);
  EXPECT_EQ(observer.results["missing"], 3);
  EXPECT_EQ(observer.results["invalid"], 1);

  const CallGate health_only{nullptr, /*health_only=*/true, nullptr};
  EXPECT_TRUE(CheckCall(health_only, "/grpc.health.v1.Health/Check", "").ok());
  EXPECT_EQ(
      CheckCall(health_only, "/performer.v1.Generation/ListModels", std::string("Bearer ") + kRoot)
          .code(),
      absl::StatusCode::kPermissionDenied);

  const CallGate open{nullptr, /*health_only=*/false, nullptr};
  EXPECT_TRUE(CheckCall(open, "/performer.v1.Generation/ListModels", "").ok());
}

class GatedServiceTest : public in_process::SharedServerTest<GatedServiceTest> {
 protected:
  static void SetUpTestSuite() {
    tokens_ = Tokens().release();
    observer_ = new CountingObserver();
    RepositoryOptions repository_options;
    repository_options.max_batch = 4;
    // Keeps the long streams running while the cancel tests reach them.
    repository_options.engine.step_delay = absl::Milliseconds(2);
    ServiceOptions service_options;
    service_options.tokens = tokens_;
    service_options.max_priority_unprivileged = 2;
    service_options.security_observer = observer_;
    auto credentials = std::make_shared<GatedServerCredentials>(
        NewPlaintextCoreCredentials(), CallGate{tokens_, /*health_only=*/false, observer_});
    Share(InProcessServer::Start(repository_options, service_options,
                                 performer::testing::RepositoryModelsRoot(), credentials));
  }
  static void TearDownTestSuite() {
    SharedServerTest::TearDownTestSuite();
    delete observer_;
    delete tokens_;
  }
  void SetUpClient() override { stub_ = server_->NewStub(); }

  static std::unique_ptr<grpc::ClientContext> As(const char* token, int seconds = 30) {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(seconds);
    if (token != nullptr) context->AddMetadata("authorization", std::string("Bearer ") + token);
    return context;
  }

  grpc::Status ListModels(const char* token) {
    v1::ListModelsResponse response;
    return stub_->ListModels(As(token).get(), v1::ListModelsRequest(), &response);
  }

  bool Cancel(const char* token, const std::string& id) {
    v1::CancelRequest request;
    request.set_request_id(id);
    v1::CancelResponse response;
    const grpc::Status status = stub_->Cancel(As(token).get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.cancelled();
  }

  // A long stream of `token`'s, started: its first message has arrived.
  struct Running {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
    // Reads to the end: the last message's finish reason, and the status.
    std::pair<v1::FinishReason, grpc::Status> Finish() {
      v1::GenerateResponse message;
      v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
      while (reader->Read(&message)) reason = message.finish_reason();
      return {reason, reader->Finish()};
    }
  };
  Running Start(const char* token, const std::string& id, int max_new_tokens = 1000) {
    Running running;
    v1::GenerateRequest request = GreedyRequest("Once upon a time", max_new_tokens);
    request.set_request_id(id);
    running.context = As(token, 120);
    running.reader = stub_->GenerateStream(running.context.get(), request);
    v1::GenerateResponse first;
    EXPECT_TRUE(running.reader->Read(&first)) << "no first message";
    return running;
  }

  static TokenAuthenticator* tokens_;
  static CountingObserver* observer_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

TokenAuthenticator* GatedServiceTest::tokens_ = nullptr;
CountingObserver* GatedServiceTest::observer_ = nullptr;

TEST_F(GatedServiceTest, EveryCallNeedsAValidToken) {
  const grpc::Status none = ListModels(nullptr);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("Bearer"), std::string::npos) << none.error_message();
  EXPECT_EQ(ListModels("wrong-token-0123456789").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(ListModels(kAlice).ok());

  v1::GenerateResponse response;
  const grpc::Status generate =
      stub_->Generate(As(nullptr).get(), GreedyRequest("Hi", 2), &response);
  EXPECT_EQ(generate.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(stub_->Generate(As(kBob).get(), GreedyRequest("Hi", 2), &response).ok());
  EXPECT_EQ(response.token_ids_size(), 2);
}

TEST_F(GatedServiceTest, PriorityAboveTheBoundNeedsThePermission) {
  v1::GenerateRequest request = GreedyRequest("Hi", 2);
  v1::GenerateResponse response;
  request.set_priority(2);  // the bound itself is allowed
  EXPECT_TRUE(stub_->Generate(As(kAlice).get(), request, &response).ok());
  request.set_priority(3);
  const grpc::Status denied = stub_->Generate(As(kAlice).get(), request, &response);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(denied.error_message().find("priority: 3 is above 2"), std::string::npos)
      << denied.error_message();
  EXPECT_NE(std::find(observer_->denied.begin(), observer_->denied.end(), "alice:priority"),
            observer_->denied.end());
  request.set_priority(100);
  EXPECT_TRUE(stub_->Generate(As(kRoot).get(), request, &response).ok());
}

TEST_F(GatedServiceTest, RequestIdsAreScopedToTheirCaller) {
  Running alice = Start(kAlice, "job-1");
  // Bob has no request named job-1: his cancel finds nothing and Alice's
  // stream goes on; he may use the same id for a request of his own.
  EXPECT_FALSE(Cancel(kBob, "job-1"));
  Running bob = Start(kBob, "job-1", 4);
  EXPECT_EQ(bob.Finish().second.error_code(), grpc::StatusCode::OK);
  // Alice cancels her own.
  EXPECT_TRUE(Cancel(kAlice, "job-1"));
  auto [reason, status] = alice.Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reason, v1::FINISH_REASON_CANCELLED);
}

TEST_F(GatedServiceTest, CancelAnyReachesEveryCallersRequest) {
  Running alice = Start(kAlice, "job-2");
  EXPECT_TRUE(Cancel(kRoot, "job-2"));
  auto [reason, status] = alice.Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reason, v1::FINISH_REASON_CANCELLED);
  EXPECT_FALSE(Cancel(kRoot, "job-2")) << "no longer live";
}

}  // namespace
}  // namespace performer::server
