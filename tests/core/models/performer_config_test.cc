#include "core/models/performer_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/models/fast_attention.h"
#include "core/models/performer_lm.h"

namespace performer::models {
namespace {

nlohmann::json MinimalLM() {
  return {{"model_class", "PerformerLM"},
          {"num_tokens", 10},
          {"max_seq_len", 8},
          {"dim", 8},
          {"depth", 1},
          {"heads", 2}};
}

TEST(PerformerConfigTest, DefaultsAreTheReferences) {
  absl::StatusOr<PerformerLMConfig> c = ParsePerformerLMConfig(MinimalLM());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->resolved_dim_head(), 64);
  EXPECT_EQ(c->resolved_nb_features(), 266);
  EXPECT_TRUE(c->rotary_position_emb);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->attn_out_bias);
  EXPECT_FALSE(c->causal);
  EXPECT_EQ(c->local_window_size, 256);
  EXPECT_EQ(c->local_heads(0), 0);
  EXPECT_EQ(c->kernel_fn, KernelFunction::kReLU);
}

TEST(PerformerConfigTest, NbFeaturesDefaultTruncates) {
  EXPECT_EQ(DefaultNbFeatures(64), 266);
  EXPECT_EQ(DefaultNbFeatures(32), 110);
  EXPECT_EQ(DefaultNbFeatures(16), 44);
  EXPECT_EQ(DefaultNbFeatures(12), 29);
  EXPECT_EQ(DefaultNbFeatures(8), 16);
  EXPECT_EQ(DefaultNbFeatures(4), 5);
}

TEST(PerformerConfigTest, UnknownAndMissingKeysAreListed) {
  nlohmann::json j = MinimalLM();
  j.erase("depth");
  j["colour"] = "blue";
  j["flavour"] = 3;
  absl::Status s = ParsePerformerLMConfig(j).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("missing required key(s): depth"), std::string::npos) << s;
  EXPECT_NE(s.message().find("unknown key(s): colour, flavour"), std::string::npos) << s;
}

TEST(PerformerConfigTest, WrongTypesNameTheKey) {
  nlohmann::json j = MinimalLM();
  j["causal"] = "yes";
  j["nb_features"] = 1.5;
  absl::Status s = ParsePerformerLMConfig(j).status();
  EXPECT_NE(s.message().find("causal must be true or false"), std::string::npos) << s;
  EXPECT_NE(s.message().find("nb_features must be an integer or null"), std::string::npos) << s;
}

TEST(PerformerConfigTest, ReferenceInvariantsAreChecked) {
  nlohmann::json j = MinimalLM();
  j["heads"] = 3;
  EXPECT_NE(ParsePerformerLMConfig(j).status().message().find("divisible by heads"),
            std::string::npos);
  j = MinimalLM();
  j["local_attn_heads"] = {1, 1, 1};
  EXPECT_NE(ParsePerformerLMConfig(j).status().message().find("local_attn_heads has 3 entries"),
            std::string::npos);
  j = MinimalLM();
  j["local_attn_heads"] = 3;
  EXPECT_NE(ParsePerformerLMConfig(j).status().message().find("outside [0, heads=2]"),
            std::string::npos);
  j = MinimalLM();
  j["dim_head"] = nullptr;
  EXPECT_NE(ParsePerformerLMConfig(j).status().message().find("rotary_position_emb false"),
            std::string::npos);
  j["rotary_position_emb"] = false;
  absl::StatusOr<PerformerLMConfig> c = ParsePerformerLMConfig(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->resolved_dim_head(), 4);
  j = MinimalLM();
  j["kernel_fn"] = "Mish2";
  EXPECT_NE(ParsePerformerLMConfig(j).status().message().find("unsupported kernel_fn 'Mish2'"),
            std::string::npos);
}

TEST(PerformerConfigTest, AxialShapeAndPositionLimit) {
  nlohmann::json j = MinimalLM();
  j["max_seq_len"] = 100;
  j["rotary_position_emb"] = false;
  j["axial_position_emb"] = true;
  absl::StatusOr<PerformerLMConfig> c = ParsePerformerLMConfig(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->resolved_axial_shape(), (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(c->position_limit(), 100);
  j["axial_position_shape"] = {4, 16};
  EXPECT_EQ(ParsePerformerLMConfig(j)->position_limit(), 64);
}

TEST(PerformerConfigTest, EncDecForcesDecoderAndRejectsUnknownKeys) {
  nlohmann::json j = {{"model_class", "PerformerEncDec"},
                      {"dim", 8},
                      {"enc_num_tokens", 5},
                      {"enc_max_seq_len", 4},
                      {"enc_depth", 1},
                      {"enc_heads", 2},
                      {"dec_num_tokens", 6},
                      {"dec_max_seq_len", 4},
                      {"dec_depth", 1},
                      {"dec_heads", 2},
                      {"dec_causal", false}};
  absl::StatusOr<PerformerEncDecConfig> c = ParsePerformerEncDecConfig(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->dec.causal);
  EXPECT_TRUE(c->dec.cross_attend);
  EXPECT_EQ(c->enc.dim, 8);
  EXPECT_EQ(c->dec.num_tokens, 6);
  j["enc_dim"] = 8;
  j["tie_token_embed"] = true;
  absl::Status s = ParsePerformerEncDecConfig(j).status();
  EXPECT_NE(s.message().find("unknown key(s): enc_dim, tie_token_embed"), std::string::npos) << s;
}

TEST(PerformerConfigTest, FastAttentionConfig) {
  absl::StatusOr<FastAttentionConfig> c =
      ParseFastAttentionConfig({{"dim_heads", 16}, {"causal", true}, {"kernel_fn", "GELU"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->resolved_nb_features(), 44);
  EXPECT_EQ(c->kernel_fn, KernelFunction::kGELU);
  EXPECT_FALSE(ParseFastAttentionConfig({{"dim_heads", 0}}).ok());
}

// Values that once reached an allocation (max_seq_len 2^62 aborted in
// LibTorch's size check, depth 10^9 allocated until memory ran out) are
// refused while parsing, each named with its bound.
TEST(PerformerConfigTest, ValuesAreBoundedBeforeAnythingIsAllocated) {
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"max_seq_len", int64_t{1} << 62}, {"depth", 1000000000}, {"num_tokens", int64_t{1} << 40},
      {"dim", int64_t{1} << 20},         {"heads", 4096},       {"dim_head", int64_t{1} << 17},
      {"nb_features", int64_t{1} << 30}, {"ff_mult", 100000},   {"ff_chunks", int64_t{1} << 40},
      {"local_window_size", -1},         {"max_seq_len", -5},   {"depth", 0}};
  for (const auto& [key, value] : cases) {
    nlohmann::json j = MinimalLM();
    j[key] = value;
    absl::StatusOr<PerformerLMConfig> c = ParsePerformerLMConfig(j);
    ASSERT_FALSE(c.ok()) << key << " = " << value;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(std::string(key) + " must be in [1, "), std::string::npos)
        << c.status();
  }
  nlohmann::json j = MinimalLM();
  j["emb_dropout"] = 2.5;
  EXPECT_NE(ParsePerformerLMConfig(j).status().message().find("emb_dropout must be in [0, 1]"),
            std::string::npos);
  j = MinimalLM();
  j["rotary_position_emb"] = false;
  j["axial_position_emb"] = true;
  j["axial_position_shape"] = {int64_t{1} << 40, 64};
  EXPECT_NE(ParsePerformerLMConfig(j).status().message().find("axial_position_shape entries"),
            std::string::npos);
  // An encoder-decoder side is bounded alike.
  nlohmann::json ed = {{"dim", 8},
                       {"enc_num_tokens", 10},
                       {"enc_max_seq_len", 8},
                       {"enc_depth", 1},
                       {"enc_heads", 2},
                       {"dec_num_tokens", 10},
                       {"dec_max_seq_len", int64_t{1} << 62},
                       {"dec_depth", 1},
                       {"dec_heads", 2}};
  absl::Status s = ParsePerformerEncDecConfig(ed).status();
  EXPECT_NE(s.message().find("decoder: invalid PerformerLM config: max_seq_len"), std::string::npos)
      << s;
  EXPECT_NE(ParseFastAttentionConfig({{"dim_heads", int64_t{1} << 40}})
                .status()
                .message()
                .find("dim_heads must be in [1, "),
            std::string::npos);
  EXPECT_NE(ParseFastAttentionConfig({{"dim_heads", 8}, {"nb_features", int64_t{1} << 40}})
                .status()
                .message()
                .find("nb_features must be in [1, "),
            std::string::npos);
}

// The bound on the elements of the model a config describes must never pass
// the real count: a folder whose weights hold the real model must load.
TEST(PerformerConfigTest, MinimumParameterElementsIsALowerBound) {
  auto count = [](torch::nn::Module& module) {
    uint64_t n = 0;
    for (const auto& item : module.named_parameters()) n += item.value().numel();
    for (const auto& item : module.named_buffers()) n += item.value().numel();
    return n;
  };
  std::vector<nlohmann::json> variants;
  variants.push_back(MinimalLM());
  nlohmann::json j = MinimalLM();
  j["ff_glu"] = true;
  j["local_attn_heads"] = 1;
  j["causal"] = true;
  j["qkv_bias"] = true;
  variants.push_back(j);
  j = MinimalLM();
  j["rotary_position_emb"] = false;
  j["axial_position_emb"] = true;
  j["axial_position_shape"] = {2, 4};
  variants.push_back(j);
  j = MinimalLM();
  j["rotary_position_emb"] = false;
  j["dim_head"] = nullptr;
  j["nb_features"] = 7;
  j["tie_embed"] = true;
  variants.push_back(j);
  for (const nlohmann::json& v : variants) {
    absl::StatusOr<PerformerLMConfig> c = ParsePerformerLMConfig(v);
    ASSERT_TRUE(c.ok()) << c.status() << " " << v.dump();
    PerformerLM lm(*c);
    const uint64_t real = count(*lm);
    EXPECT_LE(MinimumParameterElements(*c), real) << v.dump();
    EXPECT_GT(MinimumParameterElements(*c), real / 4) << v.dump();
  }
  absl::StatusOr<FastAttentionConfig> fa =
      ParseFastAttentionConfig({{"dim_heads", 16}, {"nb_features", 24}});
  ASSERT_TRUE(fa.ok());
  FastAttention attention(*fa);
  EXPECT_LE(MinimumParameterElements(*fa), count(*attention));
  // Saturates instead of wrapping around.
  PerformerLMConfig huge = *ParsePerformerLMConfig(MinimalLM());
  huge.depth = int64_t{1} << 62;
  huge.dim = int64_t{1} << 40;
  EXPECT_EQ(MinimumParameterElements(huge), UINT64_MAX);
}

// Found by tests/fuzz/model_config_fuzzer: a boolean where an integer is
// read threw nlohmann::type_error out of the parser (and, in the server,
// out of model loading). A bool is Python's int.
TEST(PerformerConfigTest, BooleanIntegersAreIntegers) {
  nlohmann::json j = MinimalLM();
  j["depth"] = false;
  absl::StatusOr<PerformerLMConfig> c = ParsePerformerLMConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("depth must be in [1, 1024], got 0"), std::string::npos)
      << c.status();
  j["depth"] = true;
  c = ParsePerformerLMConfig(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->depth, 1);
}

}  // namespace
}  // namespace performer::models
