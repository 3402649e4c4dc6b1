// A token's logits and the state after it are the same bits however its
// sequence was fed (one prompt, prompt chunks of any size, steps, a restored
// snapshot taken at any token) and whatever shares its batch: on the default
// model (local and FAVOR+ heads), a FAVOR+ PerformerLM in each weight dtype,
// generalized-kernel and projection-free PerformerLMs, PerformerLMs with
// ScaleNorm and token shift or ReZero, encoder-decoders (FAVOR+,
// generalized-kernel and projection-free cross attention), fast-transformers'
// causal linear attention with elu, Favor and random Fourier features, and
// its causal full (softmax) attention; and on a GPU under kernels::
// CudaRowInvariance() (the Cuda cases, which skip without one), the
// PerformerLMs in float32 and bfloat16, the encoder-decoders and
// fast-transformers' models.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/decoding/decoder_factory.h"
#include "core/models/model_folder.h"
#include "kernels/cuda_row_invariance.h"
#include "tests/core/models/model_test_util.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/fixtures.h"

namespace performer::decoding {
namespace {

struct Case {
  std::string name;
  std::function<models::LoadedModel()> model;
  models::WeightDtype dtype = models::WeightDtype::kFloat32;
  bool cuda = false;  // on the GPU, under kernels::CudaRowInvariance()
};

std::unique_ptr<SequenceDecoder> MakeDecoder(const Case& c, int64_t capacity) {
  models::DecodeStepOptions step;
  step.weight_dtype = c.dtype;
  models::LoadedModel model = c.model();
  if (c.cuda) model.MoveTo(torch::Device(torch::kCUDA));
  absl::StatusOr<std::unique_ptr<SequenceDecoder>> d = CreateDecoder(model, capacity, step);
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

// A prompt of `length` tokens (not a multiple of anything in particular).
std::vector<int64_t> Prompt(int64_t length, int64_t vocab, int64_t seed) {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < length; ++i) tokens.push_back((i * 37 + seed * 11 + 5) % vocab);
  return tokens;
}

// The first chunk's request: `prompt`, and for an encoder-decoder a source
// that `seed` picks (each sequence of a batch its own).
PrefillRequest FirstChunk(const SequenceDecoder& decoder, std::vector<int64_t> prompt,
                          int64_t seed) {
  PrefillRequest request{std::move(prompt), {}, {}};
  const DecoderInfo& info = decoder.info();
  if (info.needs_source) {
    request.source =
        Prompt(std::min<int64_t>(19 + seed, info.max_source_len), info.source_vocab_size, seed + 3);
  }
  return request;
}

// `wanted` tokens, or fewer where the model's positions end sooner (room
// for the steps after).
int64_t PromptLength(const SequenceDecoder& decoder, int64_t wanted) {
  return std::min(wanted, decoder.info().max_seq_len - 8);
}

// Feeds `prompt` in chunks of `chunk` (the first through Prefill, with the
// source `seed` picks), then `steps` greedy steps; returns every logits row
// after the prompt.
std::vector<torch::Tensor> Feed(SequenceDecoder& decoder, const std::vector<int64_t>& prompt,
                                size_t chunk, int steps, int64_t seed = 0) {
  SequenceId id = *decoder.Create();
  const size_t first = std::min(chunk, prompt.size());
  absl::StatusOr<torch::Tensor> logits = decoder.Prefill(
      id,
      FirstChunk(decoder, {prompt.begin(), prompt.begin() + static_cast<int64_t>(first)}, seed));
  EXPECT_TRUE(logits.ok()) << logits.status();
  for (size_t done = first; done < prompt.size(); done += chunk) {
    const size_t end = std::min(prompt.size(), done + chunk);
    logits = decoder.Extend(id, {prompt.begin() + static_cast<int64_t>(done),
                                 prompt.begin() + static_cast<int64_t>(end)});
    EXPECT_TRUE(logits.ok()) << logits.status();
  }
  std::vector<torch::Tensor> out = {logits->clone()};
  for (int s = 0; s < steps; ++s) {
    const int64_t next = out.back().argmax().item<int64_t>();
    absl::StatusOr<torch::Tensor> step = decoder.Step({id}, {next});
    EXPECT_TRUE(step.ok()) << step.status();
    out.push_back((*step)[0].clone());
  }
  EXPECT_TRUE(decoder.Release(id).ok());
  return out;
}

void ExpectSameBits(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i]))
        << what << ": logits " << i << " differ by " << (a[i] - b[i]).abs().max().item<float>();
  }
}

void ExpectChunkingChangesNoBit(const Case& c) {
  std::unique_ptr<SequenceDecoder> decoder = MakeDecoder(c, 2);
  const std::vector<int64_t> prompt =
      Prompt(PromptLength(*decoder, 150), decoder->info().vocab_size, 1);
  const std::vector<torch::Tensor> whole = Feed(*decoder, prompt, prompt.size(), 6);
  for (size_t chunk : {1, 7, 16, 64, 100, 149}) {
    ExpectSameBits(Feed(*decoder, prompt, chunk, 6), whole, "chunks of " + std::to_string(chunk));
  }
}

void ExpectBatchCompanionsChangeNoBit(const Case& c) {
  constexpr int kRows = 32;
  std::unique_ptr<SequenceDecoder> decoder = MakeDecoder(c, kRows + 1);
  const int64_t vocab = decoder->info().vocab_size;
  std::vector<SequenceId> ids;
  std::vector<int64_t> next;
  for (int r = 0; r < kRows; ++r) {
    ids.push_back(*decoder->Create());
    absl::StatusOr<torch::Tensor> logits =
        decoder->Prefill(ids.back(), FirstChunk(*decoder, Prompt(5 + r, vocab, r), r));
    ASSERT_TRUE(logits.ok()) << logits.status();
    next.push_back(logits->argmax().item<int64_t>());
  }
  std::vector<torch::Tensor> together;
  for (int s = 0; s < 4; ++s) {
    absl::StatusOr<torch::Tensor> logits = decoder->Step(ids, next);
    ASSERT_TRUE(logits.ok()) << logits.status();
    together.push_back(logits->select(0, 7).clone());
    for (int r = 0; r < kRows; ++r) next[r] = (*logits)[r].argmax().item<int64_t>();
  }
  std::unique_ptr<SequenceDecoder> alone = MakeDecoder(c, 1);
  ExpectSameBits(
      Feed(*alone, Prompt(5 + 7, vocab, 7), 64, 4, 7),
      [&] {
        std::vector<torch::Tensor> rows;
        SequenceId id = *decoder->Create();
        rows.push_back(
            decoder->Prefill(id, FirstChunk(*decoder, Prompt(5 + 7, vocab, 7), 7))->clone());
        rows.insert(rows.end(), together.begin(), together.end());
        return rows;
      }(),
      "row 7 of 32 vs alone");
}

void ExpectARestoredStateToContinueBitForBit(const Case& c) {
  std::unique_ptr<SequenceDecoder> decoder = MakeDecoder(c, 2);
  const std::vector<int64_t> prompt =
      Prompt(PromptLength(*decoder, 101), decoder->info().vocab_size, 3);
  const std::vector<torch::Tensor> cold = Feed(*decoder, prompt, prompt.size(), 4);
  // A snapshot after 37 tokens, restored into a fresh sequence, then the rest
  // of the prompt as one chunk.
  SequenceId first = *decoder->Create();
  ASSERT_TRUE(
      decoder->Prefill(first, FirstChunk(*decoder, {prompt.begin(), prompt.begin() + 37}, 0)).ok());
  absl::StatusOr<StateSnapshot> snapshot = decoder->Snapshot(first);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_TRUE(decoder->Release(first).ok());
  SequenceId resumed = *decoder->Create();
  ASSERT_TRUE(decoder->Restore(resumed, *snapshot).ok());
  absl::StatusOr<torch::Tensor> logits =
      decoder->Extend(resumed, {prompt.begin() + 37, prompt.end()});
  ASSERT_TRUE(logits.ok()) << logits.status();
  std::vector<torch::Tensor> warm = {logits->clone()};
  for (int s = 0; s < 4; ++s) {
    absl::StatusOr<torch::Tensor> step =
        decoder->Step({resumed}, {warm.back().argmax().item<int64_t>()});
    ASSERT_TRUE(step.ok()) << step.status();
    warm.push_back((*step)[0].clone());
  }
  ExpectSameBits(warm, cold, "resumed at token 37");
}

models::LoadedModel Folder(const std::string& path) {
  absl::StatusOr<models::LoadedModel> model = models::LoadModelFolder(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

models::LoadedModel DefaultModel() {
  return Folder(testing::RepositoryModelsRoot() + "/performer-fortunes");
}

// fast-transformers' causal linear attention with its Favor feature map.
models::LoadedModel FastTransformersFavorLM() {
  return Folder(testing::RepositoryFixtureRoot() +
                "/fast_transformers_lm/ftlm_causal_linear_favor");
}

// fast-transformers' causal full (softmax) attention, whose state is the
// keys and values of every position.
models::LoadedModel FastTransformersFullLM() {
  return Folder(testing::RepositoryFixtureRoot() + "/fast_transformers_lm/ftlm_full_causal");
}

models::LoadedModel FavorLM() {
  models::PerformerLMConfig config = models::testing::TinyLMConfig();
  config.max_seq_len = 256;
  config.nb_features = 16;
  config.heads = 4;
  config.local_attn_heads = {1, 0};
  config.local_window_size = 8;
  config.rotary_position_emb = true;
  return models::testing::RandomLM(config, 5);
}

// Generalized-kernel heads (a projection, then kernel_fn): ReLU, which the
// feature kernel fuses, and GELU, which goes through tensor ops.
models::LoadedModel GeneralizedLM(KernelFunction kernel_fn) {
  models::PerformerLMConfig config = models::testing::TinyLMConfig();
  config.max_seq_len = 256;
  config.nb_features = 16;
  config.heads = 4;
  config.generalized_attention = true;
  config.kernel_fn = kernel_fn;
  return models::testing::RandomLM(config, 6);
}

// Heads without a projection (softmax of q, exp of k).
models::LoadedModel NoProjectionLM() {
  models::PerformerLMConfig config = models::testing::TinyLMConfig();
  config.max_seq_len = 256;
  config.heads = 4;
  config.no_projection = true;
  return models::testing::RandomLM(config, 7);
}

// The branch variants that keep separate ops in a step: ScaleNorm with token
// shift, and ReZero.
models::LoadedModel ScaleNormShiftLM() {
  models::PerformerLMConfig config = models::testing::TinyLMConfig();
  config.max_seq_len = 256;
  config.nb_features = 16;
  config.use_scalenorm = true;
  config.shift_tokens = true;
  return models::testing::RandomLM(config, 8);
}

models::LoadedModel ReZeroLM() {
  models::PerformerLMConfig config = models::testing::TinyLMConfig();
  config.max_seq_len = 256;
  config.nb_features = 16;
  config.use_rezero = true;
  return models::testing::RandomLM(config, 10);
}

// An encoder-decoder: self attention in both stacks and the decoder's cross
// attention over the encoded source, with FAVOR+ heads, generalized-kernel
// heads in the decoder, or projection-free heads.
enum class DecoderHeads { kFavor, kGeneralized, kNoProjection };

models::LoadedModel EncoderDecoder(DecoderHeads heads = DecoderHeads::kFavor) {
  models::PerformerEncDecConfig config;
  config.dim = 16;
  config.enc = models::testing::TinyLMConfig();
  config.enc.causal = false;
  config.enc.max_seq_len = 64;
  config.enc.nb_features = 16;
  config.dec = models::testing::TinyLMConfig();
  config.dec.max_seq_len = 256;
  config.dec.nb_features = 16;
  config.dec.cross_attend = true;
  config.dec.generalized_attention = heads == DecoderHeads::kGeneralized;
  // The reference's no_projection is the whole model's.
  config.no_projection = heads == DecoderHeads::kNoProjection;
  config.enc.no_projection = config.dec.no_projection = config.no_projection;
  return models::testing::RandomEncDec(config, 11);
}

models::LoadedModel FastTransformersLinearLM() {
  nlohmann::json config = {{"model_class", "FastTransformersLM"},
                           {"num_tokens", 29},
                           {"max_seq_len", 256},
                           {"encoder",
                            {{"attention_type", "causal-linear"},
                             {"n_layers", 2},
                             {"n_heads", 2},
                             {"query_dimensions", 8},
                             {"value_dimensions", 8},
                             {"feed_forward_dimensions", 32},
                             {"activation", "gelu"}}}};
  return models::testing::RandomFastTransformersLM(config, 9);
}

// fast-transformers' causal linear attention with random Fourier features.
models::LoadedModel FastTransformersRffLM() {
  nlohmann::json config = FastTransformersLinearLM().config;
  config["encoder"]["feature_map"] = {{"type", "RandomFourierFeatures"}, {"n_dims", 16}};
  return models::testing::RandomFastTransformersLM(config, 12);
}

class SameBitsTest : public ::testing::TestWithParam<Case> {};

TEST_P(SameBitsTest, ChunkingDoesNotChangeABit) { ExpectChunkingChangesNoBit(GetParam()); }
TEST_P(SameBitsTest, BatchCompanionsDoNotChangeABit) {
  ExpectBatchCompanionsChangeNoBit(GetParam());
}
TEST_P(SameBitsTest, ARestoredStateAtAnyTokenContinuesBitForBit) {
  ExpectARestoredStateToContinueBitForBit(GetParam());
}

// The same on a GPU under kernels::CudaRowInvariance() (skips without one).
class SameBitsCudaTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { PERFORMER_REQUIRE_CUDA(); }

  const kernels::ScopedCudaRowInvariance invariance_{true};
};

TEST_P(SameBitsCudaTest, ChunkingDoesNotChangeABit) { ExpectChunkingChangesNoBit(GetParam()); }
TEST_P(SameBitsCudaTest, BatchCompanionsDoNotChangeABit) {
  ExpectBatchCompanionsChangeNoBit(GetParam());
}
TEST_P(SameBitsCudaTest, ARestoredStateAtAnyTokenContinuesBitForBit) {
  ExpectARestoredStateToContinueBitForBit(GetParam());
}

// kernels::CudaRowInvariance() is about CUDA kernels: the CPU's paths and
// bits are the same with it on (a prompt in chunks, then steps).
TEST(SameBitsCudaSwitchTest, LeavesTheCpuBitsAlone) {
  const Case c{"default_model", DefaultModel};
  std::unique_ptr<SequenceDecoder> decoder = MakeDecoder(c, 1);
  const std::vector<int64_t> prompt = Prompt(90, decoder->info().vocab_size, 4);
  const std::vector<torch::Tensor> off = Feed(*decoder, prompt, 32, 4);
  const kernels::ScopedCudaRowInvariance invariant(true);
  EXPECT_TRUE(kernels::CudaRowInvariance());
  std::unique_ptr<SequenceDecoder> switched = MakeDecoder(c, 1);
  ExpectSameBits(Feed(*switched, prompt, 32, 4), off, "with the CUDA switch on");
}

INSTANTIATE_TEST_SUITE_P(
    Models, SameBitsTest,
    ::testing::Values(Case{"default_model", DefaultModel}, Case{"favor_fp32", FavorLM},
                      Case{"favor_bf16", FavorLM, models::WeightDtype::kBFloat16},
                      Case{"favor_int8", FavorLM, models::WeightDtype::kInt8},
                      Case{"generalized_relu", [] { return GeneralizedLM(KernelFunction::kReLU); }},
                      Case{"generalized_gelu", [] { return GeneralizedLM(KernelFunction::kGELU); }},
                      Case{"no_projection", NoProjectionLM},
                      Case{"scalenorm_shift_tokens", ScaleNormShiftLM}, Case{"rezero", ReZeroLM},
                      Case{"encoder_decoder", [] { return EncoderDecoder(); }},
                      Case{"encoder_decoder_generalized",
                           [] { return EncoderDecoder(DecoderHeads::kGeneralized); }},
                      Case{"encoder_decoder_no_projection",
                           [] { return EncoderDecoder(DecoderHeads::kNoProjection); }},
                      Case{"fast_transformers_linear", FastTransformersLinearLM},
                      Case{"fast_transformers_favor", FastTransformersFavorLM},
                      Case{"fast_transformers_rff", FastTransformersRffLM},
                      Case{"fast_transformers_full", FastTransformersFullLM}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Models, SameBitsCudaTest,
    ::testing::Values(
        Case{"default_model", DefaultModel, models::WeightDtype::kFloat32, true},
        Case{"favor_fp32", FavorLM, models::WeightDtype::kFloat32, true},
        Case{"favor_bf16", FavorLM, models::WeightDtype::kBFloat16, true},
        Case{"generalized_relu", [] { return GeneralizedLM(KernelFunction::kReLU); },
             models::WeightDtype::kFloat32, true},
        Case{"no_projection", NoProjectionLM, models::WeightDtype::kFloat32, true},
        Case{"scalenorm_shift_tokens", ScaleNormShiftLM, models::WeightDtype::kFloat32, true},
        Case{"rezero", ReZeroLM, models::WeightDtype::kFloat32, true},
        Case{"encoder_decoder", [] { return EncoderDecoder(); }, models::WeightDtype::kFloat32,
             true},
        Case{"encoder_decoder_generalized",
             [] { return EncoderDecoder(DecoderHeads::kGeneralized); },
             models::WeightDtype::kFloat32, true},
        Case{"encoder_decoder_no_projection",
             [] { return EncoderDecoder(DecoderHeads::kNoProjection); },
             models::WeightDtype::kFloat32, true},
        Case{"fast_transformers_linear", FastTransformersLinearLM, models::WeightDtype::kFloat32,
             true},
        Case{"fast_transformers_favor", FastTransformersFavorLM, models::WeightDtype::kFloat32,
             true},
        Case{"fast_transformers_rff", FastTransformersRffLM, models::WeightDtype::kFloat32, true},
        Case{"fast_transformers_full", FastTransformersFullLM, models::WeightDtype::kFloat32,
             true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace performer::decoding
