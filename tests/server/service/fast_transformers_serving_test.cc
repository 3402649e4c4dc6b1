// FastTransformersLM folders (models built with fast-transformers' builders,
// tests/fixtures/fast_transformers_lm) served over gRPC beside the default
// PerformerLM: model info with the exact state bytes, and the fixtures'
// greedy tokens by unary and by stream, alone and while other models'
// requests run in the same server.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "core/decoding/decoder_factory.h"
#include "core/io/safetensors.h"
#include "core/models/model_folder.h"
#include "tests/server/service/in_process_server.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;
using in_process::ContextWithDeadline;
using in_process::InProcessServer;

const char* const kCases[] = {"ftlm_causal_linear_favor", "ftlm_full_causal"};

struct Expected {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
};

Expected ExpectedOf(const std::string& name) {
  const std::string dir =
      performer::testing::RepositoryFixtureRoot() + "/fast_transformers_lm/" + name;
  absl::StatusOr<std::map<std::string, torch::Tensor>> io =
      io::LoadSafetensors(dir + "/io.safetensors");
  EXPECT_TRUE(io.ok()) << io.status();
  auto to_vector = [](const torch::Tensor& t) {
    torch::Tensor flat = t.to(torch::kInt).contiguous();
    return std::vector<int32_t>(flat.data_ptr<int32_t>(), flat.data_ptr<int32_t>() + flat.numel());
  };
  return {to_vector(io->at("prompt")), to_vector(io->at("greedy_tokens"))};
}

v1::GenerateRequest Request(const std::string& model, const Expected& expected) {
  v1::GenerateRequest request;
  request.set_model(model);
  for (int32_t id : expected.prompt) request.mutable_prompt_tokens()->add_ids(id);
  request.set_max_new_tokens(static_cast<int32_t>(expected.tokens.size()));
  request.set_temperature(0.0f);
  return request;
}

class FastTransformersServingTest
    : public in_process::SharedServerTest<FastTransformersServingTest> {
 protected:
  static void SetUpTestSuite() {
    // A model repository of links: the two fixture folders and the default
    // model. One per process: ctest runs this suite's tests as processes
    // side by side, each setting the suite up.
    const fs::path root = Root();
    fs::remove_all(root);
    fs::create_directories(root);
    for (const char* name : kCases) {
      fs::create_directory_symlink(
          fs::path(performer::testing::RepositoryFixtureRoot()) / "fast_transformers_lm" / name,
          root / name);
    }
    fs::create_directory_symlink(
        fs::path(performer::testing::RepositoryModelsRoot()) / in_process::kDefaultModel,
        root / in_process::kDefaultModel);
    RepositoryOptions options;
    options.max_batch = 4;
    Share(InProcessServer::Start(options, ServiceOptions(), root.string()));
  }
  static void TearDownTestSuite() {
    SharedServerTest::TearDownTestSuite();
    std::error_code ignored;
    fs::remove_all(Root(), ignored);
  }
  static fs::path Root() {
    return fs::path(::testing::TempDir()) / ("ftlm_repository_" + std::to_string(::getpid()));
  }

  static std::vector<int32_t> Unary(const v1::GenerateRequest& request) {
    std::unique_ptr<v1::Generation::Stub> stub = server_->NewStub();
    v1::GenerateResponse response;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    const grpc::Status status = stub->Generate(context.get(), request, &response);
    EXPECT_TRUE(status.ok()) << request.model() << ": " << status.error_message();
    return {response.token_ids().begin(), response.token_ids().end()};
  }
  static std::vector<int32_t> Stream(const v1::GenerateRequest& request) {
    std::unique_ptr<v1::Generation::Stub> stub = server_->NewStub();
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    auto reader = stub->GenerateStream(context.get(), request);
    std::vector<int32_t> tokens;
    v1::GenerateResponse message;
    while (reader->Read(&message)) {
      tokens.insert(tokens.end(), message.token_ids().begin(), message.token_ids().end());
    }
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << request.model() << ": " << status.error_message();
    return tokens;
  }
};

TEST_F(FastTransformersServingTest, ModelInfoHasTheExactStateBytes) {
  std::unique_ptr<v1::Generation::Stub> stub = server_->NewStub();
  for (const char* name : kCases) {
    v1::GetModelRequest request;
    request.set_name(name);
    v1::ModelInfo info;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
    const grpc::Status status = stub->GetModel(context.get(), request, &info);
    ASSERT_TRUE(status.ok()) << status.error_message();
    absl::StatusOr<models::LoadedModel> model = models::LoadModelFolder(
        performer::testing::RepositoryFixtureRoot() + "/fast_transformers_lm/" + name);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(info.kind(), v1::MODEL_KIND_DECODER);
    EXPECT_EQ(info.state_bytes_per_sequence(), *decoding::StateBytesPerSequence(*model));
    EXPECT_EQ(info.max_sequence_length(), 64);
    EXPECT_TRUE(info.ready());
  }
}

TEST_F(FastTransformersServingTest, GreedyTokensEqualTheFixturesByUnaryAndStream) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Expected expected = ExpectedOf(name);
    ASSERT_EQ(expected.tokens.size(), 24u);
    EXPECT_EQ(Unary(Request(name, expected)), expected.tokens);
    EXPECT_EQ(Stream(Request(name, expected)), expected.tokens);
  }
}

TEST_F(FastTransformersServingTest, BatchedWithOtherModelsRequests) {
  // Every fixture twice (unary and stream) and default-model requests at
  // once: each gets its own answer.
  const v1::GenerateRequest performer = in_process::GreedyRequest("Hello", 32);
  const std::vector<int32_t> performer_alone = Unary(performer);
  std::vector<std::thread> clients;
  std::vector<std::vector<int32_t>> got(6);
  std::vector<std::vector<int32_t>> want(6);
  for (int i = 0; i < 2; ++i) {
    const Expected expected = ExpectedOf(kCases[i]);
    want[2 * i] = want[2 * i + 1] = expected.tokens;
    const v1::GenerateRequest request = Request(kCases[i], expected);
    clients.emplace_back([&, i, request] { got[2 * i] = Unary(request); });
    clients.emplace_back([&, i, request] { got[2 * i + 1] = Stream(request); });
  }
  want[4] = want[5] = performer_alone;
  clients.emplace_back([&] { got[4] = Stream(performer); });
  clients.emplace_back([&] { got[5] = Unary(performer); });
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "client " << i;
}

}  // namespace
}  // namespace performer::server
