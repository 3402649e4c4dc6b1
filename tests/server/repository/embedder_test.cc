#include "server/repository/embedder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/models/model_folder.h"
#include "tests/testing/fixtures.h"

namespace performer::server {
namespace {

// A bidirectional PerformerLM of the repository's fixtures.
models::LoadedModel Bidirectional() {
  auto model = models::LoadModelFolder(::performer::testing::FixtureRoot() +
                                       "/performer/lm_axial_tied_bidir");
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

// The model's final encodings of one input, computed directly.
torch::Tensor Direct(models::LoadedModel model, const std::vector<int64_t>& tokens) {
  c10::InferenceMode guard;
  models::LMForwardOptions options;
  options.return_encodings = true;
  torch::Tensor input = torch::tensor(tokens, torch::kLong).unsqueeze(0);
  return model.lm->forward(input, options)[0].to(torch::kFloat);
}

TEST(EmbedderTest, EqualsTheModelsEncodingsPooledOrNot) {
  const models::LoadedModel model = Bidirectional();
  Embedder embedder(model);
  const std::vector<int64_t> tokens = {1, 5, 9, 2};
  absl::StatusOr<Embedding> full = embedder.Embed(tokens, /*mean_pool=*/false);
  ASSERT_TRUE(full.ok()) << full.status();
  const torch::Tensor expected = Direct(model, tokens);
  EXPECT_EQ(full->tokens, 4);
  EXPECT_EQ(full->dim, expected.size(1));
  const torch::Tensor got = torch::tensor(full->values).reshape({full->tokens, full->dim});
  EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-5));
  absl::StatusOr<Embedding> pooled = embedder.Embed(tokens, /*mean_pool=*/true);
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  EXPECT_TRUE(torch::allclose(torch::tensor(pooled->values), expected.mean(0), 1e-5, 1e-5));
}

TEST(EmbedderTest, ConcurrentCallersGetTheirOwnResults) {
  const models::LoadedModel model = Bidirectional();
  Embedder embedder(model, EmbedderOptions{/*max_batch=*/8, /*max_queue=*/64});
  // Two lengths, so that batches hold several inputs of one length and
  // several lengths at once.
  std::vector<std::vector<int64_t>> inputs;
  inputs.reserve(16);
  for (int i = 0; i < 16; ++i) {
    inputs.push_back(i % 2 == 0 ? std::vector<int64_t>{1, 2 + i % 7, 3}
                                : std::vector<int64_t>{4, 5, 6 + i % 5, 7, 8});
  }
  std::vector<absl::StatusOr<Embedding>> results(inputs.size());
  std::vector<std::thread> callers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    callers.emplace_back([&, i] { results[i] = embedder.Embed(inputs[i], /*mean_pool=*/false); });
  }
  for (std::thread& t : callers) t.join();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    const torch::Tensor got =
        torch::tensor(results[i]->values).reshape({results[i]->tokens, results[i]->dim});
    EXPECT_TRUE(torch::allclose(got, Direct(model, inputs[i]), 1e-4, 1e-5)) << "input " << i;
  }
}

TEST(EmbedderTest, InvalidInputIsRefusedAtOnce) {
  Embedder embedder(Bidirectional());
  std::atomic<int> calls{0};
  absl::Status seen;
  embedder.EmbedAsync({}, false, [&](absl::StatusOr<Embedding> e) {
    ++calls;
    seen = e.status();
  });
  EXPECT_EQ(calls.load(), 1);  // answered before EmbedAsync returned
  EXPECT_TRUE(absl::IsInvalidArgument(seen)) << seen;
  EXPECT_TRUE(absl::IsInvalidArgument(embedder.Embed({1, 100000}, false).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      embedder.Embed(std::vector<int64_t>(embedder.max_tokens() + 1, 1), false).status()));
}

}  // namespace
}  // namespace performer::server
