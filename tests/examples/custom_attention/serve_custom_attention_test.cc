// The custom attention of examples/custom_attention served: a
// FastTransformersLM whose encoder says "attention_type": "square" is
// written as a model folder, loaded by the server's model repository, and
// decoded over gRPC (unary and stream) with the recurrent slot form of the
// user's attention; its greedy tokens equal those of the model's own batch
// forward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "core/models/model_folder.h"
#include "examples/custom_attention/quadratic_attention.h"
#include "tests/server/service/in_process_server.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;
using in_process::ContextWithDeadline;
using in_process::InProcessServer;

constexpr char kModel[] = "square-lm";
constexpr int kNewTokens = 20;

nlohmann::json SquareConfig() {
  return {{"model_class", "FastTransformersLM"},
          {"num_tokens", 50},
          {"max_seq_len", 48},
          {"encoder",
           {{"attention_type", "square"},
            {"quadratic_temp", 0.5},
            {"n_layers", 2},
            {"n_heads", 2},
            {"query_dimensions", 8},
            {"value_dimensions", 8},
            {"feed_forward_dimensions", 32}}}};
}

std::vector<int32_t> BatchGreedy(models::FastTransformersLMImpl& model, std::vector<int64_t> ids) {
  torch::NoGradGuard no_grad;
  std::vector<int32_t> out;
  for (int i = 0; i < kNewTokens; ++i) {
    const int64_t next = model.forward(torch::tensor(ids, torch::kLong).unsqueeze(0))[0][-1]
                             .argmax()
                             .item<int64_t>();
    out.push_back(static_cast<int32_t>(next));
    ids.push_back(next);
  }
  return out;
}

TEST(ServeCustomAttentionTest, ASquareAttentionModelIsServed) {
  ASSERT_TRUE(examples::RegisterQuadraticAttentionGlobally().ok());
  const fs::path root = fs::path(::testing::TempDir()) / "square_repository";
  fs::remove_all(root);
  absl::StatusOr<models::FastTransformersLMConfig> config =
      models::ParseFastTransformersLMConfig(SquareConfig());
  ASSERT_TRUE(config.ok()) << config.status();
  torch::manual_seed(11);
  absl::StatusOr<models::FastTransformersLM> model =
      models::FastTransformersLMImpl::Create(*config);
  ASSERT_TRUE(model.ok()) << model.status();
  (*model)->eval();
  absl::StatusOr<models::LoadedModel> written =
      models::WriteModelFolder((root / kModel).string(), SquareConfig(), **model);
  ASSERT_TRUE(written.ok()) << written.status();

  const std::vector<int64_t> prompt = {3, 14, 15, 9, 26, 5};
  const std::vector<int32_t> expected = BatchGreedy(*written->ftlm, prompt);

  RepositoryOptions options;
  options.max_batch = 2;
  absl::StatusOr<std::unique_ptr<InProcessServer>> server =
      InProcessServer::Start(options, ServiceOptions(), root.string());
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<v1::Generation::Stub> stub = (*server)->NewStub();
  v1::GenerateRequest request;
  request.set_model(kModel);
  for (int64_t id : prompt) request.mutable_prompt_tokens()->add_ids(static_cast<int32_t>(id));
  request.set_max_new_tokens(kNewTokens);
  request.set_temperature(0.0f);

  v1::GenerateResponse response;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
  const grpc::Status status = stub->Generate(context.get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end()),
            expected);

  std::unique_ptr<grpc::ClientContext> stream_context = ContextWithDeadline(60);
  auto reader = stub->GenerateStream(stream_context.get(), request);
  std::vector<int32_t> streamed;
  v1::GenerateResponse message;
  while (reader->Read(&message)) {
    streamed.insert(streamed.end(), message.token_ids().begin(), message.token_ids().end());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(streamed, expected);

  // Its state: keys and values of 48 positions, 2 layers, 2 heads of 8.
  v1::GetModelRequest get;
  get.set_name(kModel);
  v1::ModelInfo info;
  std::unique_ptr<grpc::ClientContext> info_context = ContextWithDeadline();
  ASSERT_TRUE(stub->GetModel(info_context.get(), get, &info).ok());
  EXPECT_EQ(info.state_bytes_per_sequence(), 2 * 48 * 2 * (8 + 8) * 4 + 8);
}

}  // namespace
}  // namespace performer::server
