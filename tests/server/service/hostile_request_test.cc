// Requests a hostile client would send, against an in-process server with
// small bounds: every one is refused with INVALID_ARGUMENT (or NOT_FOUND)
// and a message that names the field and stays short whatever was sent,
// every refusal reaches the RPC observers (the request log and the
// metrics), and the server serves a good request afterwards.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/observer/rpc_observer.h"
#include "tests/server/service/in_process_server.h"

namespace performer::server {
namespace {

using in_process::ContextWithDeadline;
using in_process::GreedyRequest;
using in_process::InProcessServer;
using in_process::kDefaultModel;

constexpr int64_t kMaxRequestIdBytes = 32;
constexpr int64_t kMaxStopStrings = 2;
constexpr int64_t kMaxStopStringBytes = 8;
constexpr int64_t kMaxPromptBytes = 200;
// What a refusal's message may take, whatever the request carried.
constexpr size_t kMaxMessageBytes = 400;

// Keeps what the service reports of each finished RPC.
class RecordingObserver : public RpcObserver {
 public:
  void OnRpcStart(std::string_view /*method*/) override {}
  void OnRpcEnd(const RpcRecord& record) override {
    std::lock_guard<std::mutex> lock(mu_);
    ends_.push_back({std::string(record.method), record.status.code(), record.request_id});
  }
  struct End {
    std::string method;
    absl::StatusCode code;
    std::string request_id;
  };
  std::vector<End> ends() {
    std::lock_guard<std::mutex> lock(mu_);
    return ends_;
  }

 private:
  std::mutex mu_;
  std::vector<End> ends_;
};

class HostileRequestTest : public in_process::SharedServerTest<HostileRequestTest> {
 protected:
  static void SetUpTestSuite() {
    RepositoryOptions repository_options;
    repository_options.max_batch = 2;
    RequestBounds& bounds = repository_options.engine.request_bounds;
    bounds.max_request_id_bytes = kMaxRequestIdBytes;
    bounds.max_stop_strings = kMaxStopStrings;
    bounds.max_stop_string_bytes = kMaxStopStringBytes;
    bounds.max_prompt_bytes = kMaxPromptBytes;
    observer_ = new RecordingObserver();
    ServiceOptions service_options;
    service_options.observers.push_back(observer_);
    Share(InProcessServer::Start(repository_options, service_options));
  }
  static void TearDownTestSuite() {
    SharedServerTest::TearDownTestSuite();
    delete observer_;
    observer_ = nullptr;
  }
  void SetUpClient() override { stub_ = server_->NewStub(); }
  void TearDown() override {
    // Whatever was refused, a good request is served.
    v1::GenerateResponse response;
    const grpc::Status status =
        stub_->Generate(ContextWithDeadline().get(), GreedyRequest("ok", 2), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.token_ids_size(), 2);
  }

  // Generate and GenerateStream both refuse `request` with `code` and a
  // short message that contains `field`.
  void ExpectRefused(const v1::GenerateRequest& request, grpc::StatusCode code,
                     const std::string& field) {
    v1::GenerateResponse response;
    const grpc::Status unary = stub_->Generate(ContextWithDeadline().get(), request, &response);
    EXPECT_EQ(unary.error_code(), code) << unary.error_message();
    EXPECT_NE(unary.error_message().find(field), std::string::npos) << unary.error_message();
    EXPECT_LE(unary.error_message().size(), kMaxMessageBytes);

    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->GenerateStream(context.get(), request);
    v1::GenerateResponse message;
    EXPECT_FALSE(reader->Read(&message)) << "a message before the refusal";
    const grpc::Status stream = reader->Finish();
    EXPECT_EQ(stream.error_code(), code) << stream.error_message();
    EXPECT_NE(stream.error_message().find(field), std::string::npos) << stream.error_message();
  }

  // The observers heard of a `method` call that ended with `code`.
  void ExpectObserved(const std::string& method, absl::StatusCode code) {
    // The observer hears of a call as it finishes, just before the client
    // does; allow the server a moment.
    for (int i = 0; i < 200; ++i) {
      for (const RecordingObserver::End& end : observer_->ends()) {
        if (end.method == method && end.code == code) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no " << method << " call ended with " << absl::StatusCodeToString(code);
  }

  static RecordingObserver* observer_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

RecordingObserver* HostileRequestTest::observer_ = nullptr;

TEST_F(HostileRequestTest, OverLongRequestIdIsRefusedAndNotEchoed) {
  v1::GenerateRequest request = GreedyRequest("hi", 2);
  request.set_request_id(std::string(1 << 20, 'x'));
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "request_id");
  ExpectObserved("Generate", absl::StatusCode::kInvalidArgument);
  // An id of the longest allowed length is served and echoed.
  request.set_request_id(std::string(kMaxRequestIdBytes, 'y'));
  v1::GenerateResponse response;
  const grpc::Status status = stub_->Generate(ContextWithDeadline().get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.request_id(), request.request_id());
}

TEST_F(HostileRequestTest, StopStringsAreBoundedInCountAndBytes) {
  v1::GenerateRequest request = GreedyRequest("hi", 2);
  for (int i = 0; i <= kMaxStopStrings; ++i) request.add_stop_strings("s");
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "stop_strings");
  request.clear_stop_strings();
  request.add_stop_strings(std::string(kMaxStopStringBytes + 1, 's'));
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "stop_strings[0]");
  // At the bounds: served.
  request.clear_stop_strings();
  for (int i = 0; i < kMaxStopStrings; ++i) {
    request.add_stop_strings(std::string(kMaxStopStringBytes, 'a' + i));
  }
  v1::GenerateResponse response;
  const grpc::Status status = stub_->Generate(ContextWithDeadline().get(), request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(HostileRequestTest, PromptTextIsBoundedBeforeTokenizing) {
  v1::GenerateRequest request;
  request.set_model(kDefaultModel);
  request.set_max_new_tokens(2);
  request.set_prompt_text(std::string(kMaxPromptBytes + 1, 'p'));
  ExpectRefused(request, grpc::StatusCode::INVALID_ARGUMENT, "prompt_text");
}

TEST_F(HostileRequestTest, HugeModelNameIsNotEchoedWhole) {
  v1::GenerateRequest request = GreedyRequest("hi", 2);
  request.set_model(std::string(100 * 1024, 'm'));
  ExpectRefused(request, grpc::StatusCode::NOT_FOUND, "model");
  v1::GetModelRequest get;
  get.set_name(std::string(100 * 1024, 'm'));
  v1::ModelInfo info;
  const grpc::Status status = stub_->GetModel(ContextWithDeadline().get(), get, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LE(status.error_message().size(), kMaxMessageBytes);
}

TEST_F(HostileRequestTest, CancelOfAnOverLongIdIsRefused) {
  v1::CancelRequest cancel;
  cancel.set_request_id(std::string(kMaxRequestIdBytes + 1, 'c'));
  v1::CancelResponse response;
  const grpc::Status status = stub_->Cancel(ContextWithDeadline().get(), cancel, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("request_id"), std::string::npos);
}

// A message that does not parse as its type (a proto3 string field with
// bytes that are not UTF-8) gets INVALID_ARGUMENT that says so, not gRPC's
// bare UNIMPLEMENTED, and is reported like any refused call.
TEST_F(HostileRequestTest, UnparsableRequestIsInvalidArgumentAndObserved) {
  // Field 2 (model), length-delimited, 2 bytes that are not UTF-8.
  const std::string bytes = {0x12, 0x02, static_cast<char>(0xff), static_cast<char>(0xfe)};
  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  for (const char* method :
       {"/performer.v1.Generation/Generate", "/inference.GRPCInferenceService/ModelInfer"}) {
    SCOPED_TRACE(method);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    std::promise<grpc::Status> done;
    generic.UnaryCall(context.get(), method, grpc::StubOptions(), &request, &response,
                      [&done](grpc::Status status) { done.set_value(std::move(status)); });
    const grpc::Status status = done.get_future().get();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("UTF-8"), std::string::npos) << status.error_message();
  }
  ExpectObserved("Generate", absl::StatusCode::kInvalidArgument);
  ExpectObserved("ModelInfer", absl::StatusCode::kInvalidArgument);
}

// On ModelStreamInfer, a message that does not parse is told apart from the
// client's half-close (gRPC reports both alike to a typed reactor): the
// request before it is answered, then the stream ends INVALID_ARGUMENT
// naming it, nothing after it is served, and it is reported like any
// refused call.
TEST_F(HostileRequestTest, UnparsableStreamRequestEndsTheStreamAndIsObserved) {
  inference::ModelInferRequest valid;
  valid.set_model_name(kDefaultModel);
  valid.set_id("before");
  auto* input = valid.add_inputs();
  input->set_name("text_input");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents("hi");
  (*valid.mutable_parameters())["max_tokens"].set_int64_param(2);
  std::vector<std::string> messages = {valid.SerializeAsString()};
  // Field 1 (model_name), length-delimited, 2 bytes that are not UTF-8.
  messages.push_back(std::string{0x0a, 0x02, static_cast<char>(0xff), static_cast<char>(0xfe)});
  valid.set_id("after");
  messages.push_back(valid.SerializeAsString());

  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  // Starts one operation and waits for it; whether it succeeded.
  intptr_t last_tag = 0;
  auto run = [&queue, &last_tag](const std::function<void(void*)>& start) {
    void* tag = reinterpret_cast<void*>(++last_tag);
    start(tag);
    void* done = nullptr;
    bool ok = false;
    EXPECT_TRUE(queue.Next(&done, &ok));
    EXPECT_EQ(done, tag);
    return ok;
  };
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = generic.PrepareCall(
      context.get(), "/inference.GRPCInferenceService/ModelStreamInfer", &queue);
  EXPECT_TRUE(run([&call](void* tag) { call->StartCall(tag); }));
  for (const std::string& message : messages) {
    grpc::Slice slice(message);
    grpc::ByteBuffer buffer(&slice, 1);
    // The server may have ended the call before the last one: not checked.
    run([&call, &buffer](void* tag) { call->Write(buffer, tag); });
  }
  run([&call](void* tag) { call->WritesDone(tag); });
  std::vector<inference::ModelStreamInferResponse> responses;
  grpc::ByteBuffer received;
  while (run([&call, &received](void* tag) { call->Read(&received, tag); })) {
    responses.emplace_back();
    EXPECT_TRUE(grpc::SerializationTraits<inference::ModelStreamInferResponse>::Deserialize(
                    &received, &responses.back())
                    .ok());
  }
  grpc::Status status;
  EXPECT_TRUE(run([&call, &status](void* tag) { call->Finish(&status, tag); }));
  queue.Shutdown();
  void* ignored_tag = nullptr;
  bool ignored_ok = false;
  while (queue.Next(&ignored_tag, &ignored_ok)) {
  }

  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("request 2 of the ModelStreamInfer stream does not parse"),
            std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find("UTF-8"), std::string::npos) << status.error_message();
  ASSERT_FALSE(responses.empty());
  for (const auto& response : responses) {
    EXPECT_EQ(response.error_message(), "");
    EXPECT_EQ(response.infer_response().id(), "before");
  }
  const auto& last = responses.back().infer_response().parameters();
  ASSERT_EQ(last.count("triton_final_response"), 1u);
  EXPECT_TRUE(last.at("triton_final_response").bool_param());
  ExpectObserved("ModelStreamInfer", absl::StatusCode::kOk);
  ExpectObserved("ModelStreamInfer", absl::StatusCode::kInvalidArgument);
  for (const RecordingObserver::End& end : observer_->ends()) {
    EXPECT_NE(end.request_id, "after") << "a request after the unparsable one was read";
  }
}

}  // namespace
}  // namespace performer::server
