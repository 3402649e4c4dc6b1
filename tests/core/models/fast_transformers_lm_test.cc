// FastTransformersLM: its config.json, and its recurrent decoding (the slot
// form of the library's recurrent attentions) against its own batch forward,
// for linear attention (elu and Favor features) and full softmax attention.
#include "core/models/fast_transformers_lm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/decoding/decoder_factory.h"
#include "core/decoding/fast_transformers_decoder.h"
#include "core/models/model_folder.h"
#include "tests/core/models/model_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::models {
namespace {

constexpr int64_t kVocab = 23, kMaxSeqLen = 40;

nlohmann::json Config(const std::string& attention_type, nlohmann::json feature_map = nullptr) {
  nlohmann::json encoder = {{"attention_type", attention_type},
                            {"n_layers", 2},
                            {"n_heads", 2},
                            {"query_dimensions", 4},
                            {"value_dimensions", 4},
                            {"feed_forward_dimensions", 16},
                            {"activation", "gelu"}};
  if (!feature_map.is_null()) encoder["feature_map"] = feature_map;
  return {{"model_class", "FastTransformersLM"},
          {"num_tokens", kVocab},
          {"max_seq_len", kMaxSeqLen},
          {"encoder", encoder}};
}

// Argmax continuation by full batch forwards of the growing sequence.
std::vector<int64_t> BatchGreedy(FastTransformersLMImpl& model, std::vector<int64_t> ids, int n) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    torch::Tensor logits = model.forward(torch::tensor(ids, torch::kLong).unsqueeze(0));
    const int64_t next = logits[0][-1].argmax().item<int64_t>();
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

class FastTransformersLMDecodingTest : public ::testing::TestWithParam<nlohmann::json> {};

TEST_P(FastTransformersLMDecodingTest, DecoderMatchesTheBatchForward) {
  LoadedModel model = testing::RandomFastTransformersLM(GetParam(), 7);
  FastTransformersLM lm = model.ftlm;
  absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> decoder =
      decoding::CreateDecoder(model, 4);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const std::vector<int64_t> prompt = {1, 5, 9, 2, 17, 3};
  torch::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    expected = lm->forward(torch::tensor(prompt, torch::kLong).unsqueeze(0))[0];
  }
  // Prefill of the first 4 tokens, Extend by 2: each gives the batch
  // forward's logits at its last token.
  absl::StatusOr<decoding::SequenceId> a = (*decoder)->Create();
  ASSERT_TRUE(a.ok());
  absl::StatusOr<torch::Tensor> prefill =
      (*decoder)->Prefill(*a, {{prompt.begin(), prompt.begin() + 4}, {}, {}});
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_TENSOR_CLOSE(*prefill, expected[3], 1e-4, 1e-4);
  absl::StatusOr<torch::Tensor> extended = (*decoder)->Extend(*a, {prompt[4], prompt[5]});
  ASSERT_TRUE(extended.ok()) << extended.status();
  EXPECT_TENSOR_CLOSE(*extended, expected[5], 1e-4, 1e-4);
  // A second sequence at another position; steps of both together give
  // each one's greedy continuation.
  absl::StatusOr<decoding::SequenceId> b = (*decoder)->Create();
  ASSERT_TRUE(b.ok());
  const std::vector<int64_t> prompt_b = {4, 4, 8};
  absl::StatusOr<torch::Tensor> prefill_b = (*decoder)->Prefill(*b, {prompt_b, {}, {}});
  ASSERT_TRUE(prefill_b.ok()) << prefill_b.status();
  const std::vector<int64_t> want_a = BatchGreedy(*lm, prompt, 8);
  const std::vector<int64_t> want_b = BatchGreedy(*lm, prompt_b, 8);
  std::vector<int64_t> got_a = {extended->argmax().item<int64_t>()};
  std::vector<int64_t> got_b = {prefill_b->argmax().item<int64_t>()};
  for (int i = 1; i < 8; ++i) {
    // Caller order b, a: the decoder answers in the caller's order.
    absl::StatusOr<torch::Tensor> logits = (*decoder)->Step({*b, *a}, {got_b.back(), got_a.back()});
    ASSERT_TRUE(logits.ok()) << logits.status();
    got_b.push_back((*logits)[0].argmax().item<int64_t>());
    got_a.push_back((*logits)[1].argmax().item<int64_t>());
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  EXPECT_EQ(*(*decoder)->Position(*a), 13);
  // Releasing a moves b's row: b continues unchanged.
  ASSERT_TRUE((*decoder)->Release(*a).ok());
  absl::StatusOr<torch::Tensor> after = (*decoder)->Step({*b}, {got_b.back()});
  ASSERT_TRUE(after.ok()) << after.status();
  std::vector<int64_t> sequence_b = prompt_b;
  sequence_b.insert(sequence_b.end(), got_b.begin(), got_b.end());
  torch::NoGradGuard no_grad;
  EXPECT_TENSOR_CLOSE((*after)[0],
                      lm->forward(torch::tensor(sequence_b, torch::kLong).unsqueeze(0))[0][-1],
                      1e-4, 1e-4);
  EXPECT_EQ((*decoder)->active(), 1);
}

INSTANTIATE_TEST_SUITE_P(
    AttentionTypes, FastTransformersLMDecodingTest,
    ::testing::Values(Config("causal-linear"),
                      Config("causal-linear", {{"type", "Favor"}, {"n_dims", 8}}),
                      Config("causal-linear",
                             {{"type", "GeneralizedRandomFeatures"}, {"n_dims", 8}}),
                      Config("full")),
    [](const ::testing::TestParamInfo<nlohmann::json>& info) {
      const nlohmann::json& encoder = info.param["encoder"];
      std::string name = encoder["attention_type"].get<std::string>();
      if (encoder.contains("feature_map"))
        name += "_" + encoder["feature_map"]["type"].get<std::string>();
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(FastTransformersLMTest, StateBytesAreExact) {
  // Linear: per layer H x F x (D + 1) floats; full: keys and values for
  // max_seq_len positions; plus the position (8 bytes).
  LoadedModel linear = testing::RandomFastTransformersLM(Config("causal-linear"), 1);
  EXPECT_EQ(*decoding::StateBytesPerSequence(linear), 2 * (2 * 4 * 5 * 4) + 8);
  LoadedModel full = testing::RandomFastTransformersLM(Config("full"), 1);
  EXPECT_EQ(*decoding::StateBytesPerSequence(full), 2 * (kMaxSeqLen * 2 * (4 + 4) * 4) + 8);
  absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> decoder =
      decoding::CreateDecoder(full, 3);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  EXPECT_EQ((*decoder)->info().state_bytes_per_sequence, *decoding::StateBytesPerSequence(full));
  EXPECT_EQ((*decoder)->info().model_class, "FastTransformersLM");
  EXPECT_EQ((*decoder)->info().max_seq_len, kMaxSeqLen);
  EXPECT_EQ((*decoder)->info().vocab_size, kVocab);
}

// Each weight dtype decodes (prefill and steps on the compact weights) close
// to float32, holds no float32 copy of a linear layer (the recurrent twin
// shares the converted weights) and reports fewer weight bytes; the batch
// forward runs on the same compact weights.
TEST(FastTransformersLMTest, DecodesInEachWeightDtype) {
  struct Case {
    WeightDtype dtype;
    torch::ScalarType scalar;
    double tolerance;
  };
  std::vector<torch::Tensor> reference;
  int64_t fp32_bytes = 0;
  for (const Case& c : {Case{WeightDtype::kFloat32, torch::kFloat, 0.0},
                        Case{WeightDtype::kBFloat16, torch::kBFloat16, 0.05},
                        Case{WeightDtype::kInt8, torch::kChar, 0.1}}) {
    SCOPED_TRACE(WeightDtypeName(c.dtype));
    const LoadedModel model = testing::RandomFastTransformersLM(Config("causal-linear"), 3);
    int64_t bytes = 0;
    for (const torch::Tensor& t : model.ftlm->parameters()) bytes += t.numel() * t.element_size();
    for (const torch::Tensor& t : model.ftlm->buffers()) bytes += t.numel() * t.element_size();
    DecodeStepOptions step;
    step.weight_dtype = c.dtype;
    absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> decoder =
        decoding::CreateDecoder(model, 2, step);
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    EXPECT_EQ((*decoder)->info().weight_dtype, WeightDtypeName(c.dtype));
    for (const auto& m : model.ftlm->modules()) {
      if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get())) {
        EXPECT_EQ(linear->weight.scalar_type(), c.scalar);
      }
    }
    if (c.dtype == WeightDtype::kFloat32) {
      fp32_bytes = bytes;
      EXPECT_EQ((*decoder)->info().weight_bytes, bytes);
    } else {
      EXPECT_LT((*decoder)->info().weight_bytes, fp32_bytes);
    }
    absl::StatusOr<decoding::SequenceId> id = (*decoder)->Create();
    ASSERT_TRUE(id.ok());
    std::vector<torch::Tensor> logits;
    absl::StatusOr<torch::Tensor> first = (*decoder)->Prefill(*id, {{1, 2, 3, 4, 5}, {}, {}});
    ASSERT_TRUE(first.ok()) << first.status();
    logits.push_back(*first);
    for (int64_t token : {6, 7, 8, 9}) {
      absl::StatusOr<torch::Tensor> next = (*decoder)->Step({*id}, {token});
      ASSERT_TRUE(next.ok()) << next.status();
      logits.push_back((*next)[0]);
    }
    {
      torch::NoGradGuard no_grad;
      torch::Tensor batch = model.ftlm->forward(torch::arange(1, 10).unsqueeze(0));
      EXPECT_TENSOR_CLOSE(batch[0][8], logits.back(), 1e-4, 1e-4);
    }
    if (reference.empty()) {
      reference = logits;
      continue;
    }
    for (size_t i = 0; i < logits.size(); ++i) {
      SCOPED_TRACE("token " + std::to_string(i));
      EXPECT_TENSOR_CLOSE(logits[i], reference[i], c.tolerance, c.tolerance);
    }
  }
}

TEST(FastTransformersLMTest, DecoderChecksItsArguments) {
  absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> decoder =
      decoding::CreateDecoder(testing::RandomFastTransformersLM(Config("full"), 2), 1);
  ASSERT_TRUE(decoder.ok());
  absl::StatusOr<decoding::SequenceId> id = (*decoder)->Create();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ((*decoder)->Create().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*decoder)->Prefill(*id, {{kVocab}, {}, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*decoder)->Prefill(*id, {{1}, {2}, {}}).status().message(),
            "a decoder-only model takes no source");
  EXPECT_EQ(
      (*decoder)->Prefill(*id, {std::vector<int64_t>(kMaxSeqLen + 1, 1), {}, {}}).status().code(),
      absl::StatusCode::kOutOfRange);
  ASSERT_TRUE((*decoder)->Prefill(*id, {std::vector<int64_t>(kMaxSeqLen - 1, 1), {}, {}}).ok());
  EXPECT_TRUE((*decoder)->Step({*id}, {1}).ok());
  EXPECT_EQ((*decoder)->Step({*id}, {1}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*decoder)->Extend(*id, {1}).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(FastTransformersLMTest, ConfigIsCheckedAndTranslated) {
  absl::StatusOr<FastTransformersLMConfig> favor = ParseFastTransformersLMConfig(
      Config("causal-linear", {{"type", "Favor"}, {"n_dims", 8}, {"deterministic_eval", true}}));
  ASSERT_TRUE(favor.ok()) << favor.status();
  EXPECT_EQ(favor->encoder["feature_map"],
            (nlohmann::json{{"factory", "Favor"},
                            {"kwargs", {{"n_dims", 8}, {"deterministic_eval", true}}}}));
  absl::StatusOr<FastTransformersLMConfig> elu =
      ParseFastTransformersLMConfig(Config("causal-linear", {{"type", "elu"}}));
  ASSERT_TRUE(elu.ok()) << elu.status();
  EXPECT_EQ(elu->encoder["feature_map"]["factory"], "elu_feature_map");

  nlohmann::json huge = Config("full");
  huge["max_seq_len"] = int64_t{1} << 62;
  EXPECT_EQ(ParseFastTransformersLMConfig(huge).status().message(),
            "\"max_seq_len\" must be an integer in [1, 1048576], got 4611686018427387904");
  nlohmann::json deep = Config("full");
  deep["encoder"]["n_layers"] = 1000000000;
  EXPECT_EQ(ParseFastTransformersLMConfig(deep).status().code(),
            absl::StatusCode::kInvalidArgument);
  nlohmann::json no_encoder = Config("full");
  no_encoder.erase("encoder");
  EXPECT_EQ(ParseFastTransformersLMConfig(no_encoder).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseFastTransformersLMConfig(Config("full", "Favor")).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An attention the recurrent registry does not know cannot decode.
  absl::StatusOr<FastTransformersLMConfig> reformer =
      ParseFastTransformersLMConfig(Config("reformer"));
  ASSERT_TRUE(reformer.ok());
  absl::StatusOr<FastTransformersLM> built = FastTransformersLMImpl::Create(*reformer);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("attention_type reformer has no recurrent form"),
            std::string::npos)
      << built.status();
}

TEST(FastTransformersLMTest, FolderRoundTrip) {
  // Written as a folder (the state dict names of fast-transformers) and
  // loaded back, the model gives the same logits.
  LoadedModel model = testing::RandomFastTransformersLM(
      Config("causal-linear", {{"type", "Favor"}, {"n_dims", 8}}), 3);
  const std::string dir = ::testing::TempDir() + "/ftlm_roundtrip";
  absl::StatusOr<LoadedModel> loaded = WriteModelFolder(dir, model.config, *model.ftlm);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->ftlm);
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::tensor({{1, 2, 3, 4}}, torch::kLong);
  EXPECT_TENSOR_CLOSE(loaded->ftlm->forward(tokens), model.ftlm->forward(tokens), 1e-6, 1e-6);
  const auto state = loaded->ftlm->named_buffers();
  EXPECT_NE(state.find("encoder.layers.0.attention.inner_attention.feature_map.omega"), nullptr);
}

}  // namespace
}  // namespace performer::models
