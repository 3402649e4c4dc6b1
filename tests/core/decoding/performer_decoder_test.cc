#include "core/decoding/performer_decoder.h"

#include <gtest/gtest.h>

#include "core/decoding/generate.h"
#include "kernels/linear_state_step.h"
#include "tests/core/models/model_test_util.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/fixtures.h"

namespace performer::decoding {
namespace {

using models::PerformerLMConfig;
using models::testing::RandomLM;
using models::testing::TinyLMConfig;

std::unique_ptr<PerformerDecoder> MakeDecoder(const PerformerLMConfig& config,
                                              int64_t capacity = 8) {
  absl::StatusOr<std::unique_ptr<PerformerDecoder>> d =
      PerformerDecoder::Create(RandomLM(config), capacity);
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

// Logits of the last position of a full forward over `tokens`.
torch::Tensor FullForwardLast(PerformerDecoder& decoder, models::PerformerLM lm,
                              const std::vector<int64_t>& tokens) {
  torch::NoGradGuard no_grad;
  torch::Tensor t = torch::tensor(tokens, torch::kLong).unsqueeze(0);
  return lm(t)[0][static_cast<int64_t>(tokens.size()) - 1];
}

struct Variant {
  std::string name;
  std::function<void(PerformerLMConfig&)> apply;
  double atol;  // recurrent vs full re-forward
};

class RecurrentVsFullForward : public ::testing::TestWithParam<Variant> {};

// Prefills a prompt, steps 30 tokens and compares each logits with a full
// forward over the whole sequence so far. Generalized-kernel models are
// exactly incremental. Softmax-kernel ones are not: the reference's key
// stabiliser is the maximum over the whole sequence, future tokens included,
// while the decoder (prompts too, on the CPU) frames each token's key sums
// with the running maximum up to it, so that a token's logits never depend
// on what follows (docs/reference/performer-pytorch.md §9.1); with this
// tiny model's 1e-4 kernel epsilon against few features the two differ by
// up to a few 1e-2.
TEST_P(RecurrentVsFullForward, StepLogitsMatch) {
  PerformerLMConfig config = TinyLMConfig();
  GetParam().apply(config);
  models::LoadedModel model = RandomLM(config);
  models::PerformerLM lm = model.lm;
  auto decoder = *PerformerDecoder::Create(std::move(model), 4);
  std::vector<int64_t> seq = {3, 1, 4, 1, 5};
  SequenceId id = *decoder->Create();
  absl::StatusOr<torch::Tensor> logits = decoder->Prefill(id, {seq, {}, {}});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_TENSOR_CLOSE(*logits, FullForwardLast(*decoder, lm, seq), GetParam().atol, 1e-4);
  for (int step = 0; step < 30; ++step) {
    const int64_t next = (step * 7 + 2) % config.num_tokens;
    seq.push_back(next);
    absl::StatusOr<torch::Tensor> out = decoder->Step({id}, {next});
    ASSERT_TRUE(out.ok()) << out.status();
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_TENSOR_CLOSE((*out)[0], FullForwardLast(*decoder, lm, seq), GetParam().atol, 1e-4);
  }
  EXPECT_EQ(*decoder->Position(id), static_cast<int64_t>(seq.size()));
}

// Chunked prefill: Prefill + Extend(chunks) gives the logits of Prefill +
// one Step per token and leaves the same state behind where the recurrence
// is exact (generalized kernel, local heads), where both also equal the
// full forward. Softmax-kernel chunks use one stabiliser per chunk where
// steps use each token's running maximum (FastAttentionImpl::Extend; at one
// layer a chunk equals the full forward, fast_attention_test.cc): here the
// two differ by under 1e-4, within StepLogitsMatch's tolerance.
TEST_P(RecurrentVsFullForward, ExtendMatchesSteps) {
  PerformerLMConfig config = TinyLMConfig();
  GetParam().apply(config);
  models::LoadedModel model = RandomLM(config);
  models::PerformerLM lm = model.lm;
  auto decoder = *PerformerDecoder::Create(std::move(model), 4);
  const bool exact = GetParam().atol < 1e-4;
  const std::vector<int64_t> prompt = {3, 1, 4, 1, 5};
  std::vector<int64_t> rest(20);
  for (int64_t i = 0; i < 20; ++i) rest[static_cast<size_t>(i)] = (i * 11 + 3) % config.num_tokens;
  SequenceId stepped = *decoder->Create();
  SequenceId extended = *decoder->Create();
  ASSERT_TRUE(decoder->Prefill(stepped, {prompt, {}, {}}).ok());
  ASSERT_TRUE(decoder->Prefill(extended, {prompt, {}, {}}).ok());
  std::vector<int64_t> seq = prompt;
  size_t done = 0;
  for (size_t chunk : {1, 7, 12}) {
    std::vector<int64_t> piece(rest.begin() + done, rest.begin() + done + chunk);
    torch::Tensor step_logits;
    for (int64_t token : piece) step_logits = (*decoder->Step({stepped}, {token}))[0];
    absl::StatusOr<torch::Tensor> extend_logits = decoder->Extend(extended, piece);
    ASSERT_TRUE(extend_logits.ok()) << extend_logits.status();
    seq.insert(seq.end(), piece.begin(), piece.end());
    done += chunk;
    SCOPED_TRACE("after " + std::to_string(done) + " extra tokens");
    if (exact) {
      EXPECT_TENSOR_CLOSE(*extend_logits, step_logits, 1e-5, 1e-5);
      EXPECT_TENSOR_CLOSE(*extend_logits, FullForwardLast(*decoder, lm, seq), GetParam().atol,
                          1e-4);
    } else {
      EXPECT_TENSOR_CLOSE(*extend_logits, step_logits, GetParam().atol, 1e-4);
    }
  }
  EXPECT_EQ(*decoder->Position(extended), static_cast<int64_t>(seq.size()));
  // The states agree: the next step gives the same logits (within the
  // bound for the softmax kernel).
  torch::Tensor a = (*decoder->Step({stepped}, {2}))[0];
  torch::Tensor b = (*decoder->Step({extended}, {2}))[0];
  EXPECT_TENSOR_CLOSE(b, a, exact ? 1e-5 : GetParam().atol, exact ? 1e-5 : 1e-4);
  // Past max_seq_len: OutOfRange naming the limit.
  std::vector<int64_t> too_many(static_cast<size_t>(config.max_seq_len), 1);
  absl::StatusOr<torch::Tensor> overflow = decoder->Extend(extended, too_many);
  EXPECT_TRUE(absl::IsOutOfRange(overflow.status())) << overflow.status();
}

// PrefillBatch gives each sequence what Prefill gives it alone, both when
// the prompts have one length in consecutive slots (one forward) and when
// not (one by one); the states agree: the next steps give the same logits.
// An item that fails its checks fails alone.
TEST_P(RecurrentVsFullForward, PrefillBatchMatchesPrefillAlone) {
  PerformerLMConfig config = TinyLMConfig();
  GetParam().apply(config);
  auto decoder = MakeDecoder(config, 8);
  constexpr int kSteps = 4;
  auto alone = [&](const std::vector<int64_t>& prompt) {
    const SequenceId id = *decoder->Create();
    std::vector<torch::Tensor> out = {*decoder->Prefill(id, {prompt, {}, {}})};
    for (int t = 0; t < kSteps; ++t) out.push_back((*decoder->Step({id}, {t + 1}))[0]);
    EXPECT_TRUE(decoder->Release(id).ok());
    return out;
  };
  const std::vector<std::vector<std::vector<int64_t>>> sets = {
      {{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}, {11, 12, 13, 14, 15}},  // one forward
      {{3, 1, 4}, {1, 5, 9, 2, 6, 5}}};                           // one by one
  for (const auto& prompts : sets) {
    std::vector<std::vector<torch::Tensor>> expected;
    for (const auto& p : prompts) expected.push_back(alone(p));
    std::vector<PrefillItem> items;
    std::vector<SequenceId> ids;
    for (const auto& p : prompts) {
      ids.push_back(*decoder->Create());
      items.push_back({ids.back(), {p, {}, {}}});
    }
    const std::vector<absl::StatusOr<torch::Tensor>> got = decoder->PrefillBatch(items);
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << got[i].status();
      EXPECT_TENSOR_CLOSE(*got[i], expected[i][0], 1e-5, 1e-5);
      EXPECT_EQ(*decoder->Position(ids[i]), static_cast<int64_t>(prompts[i].size()));
    }
    for (int t = 0; t < kSteps; ++t) {
      const torch::Tensor out =
          *decoder->Step(ids, std::vector<int64_t>(ids.size(), static_cast<int64_t>(t + 1)));
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_TENSOR_CLOSE(out[static_cast<int64_t>(i)], expected[i][static_cast<size_t>(t + 1)],
                            1e-5, 1e-5);
      }
    }
    for (SequenceId id : ids) ASSERT_TRUE(decoder->Release(id).ok());
  }
  const SequenceId id = *decoder->Create();
  const std::vector<absl::StatusOr<torch::Tensor>> got =
      decoder->PrefillBatch({{id, {{1, 2}, {}, {}}}, {id + 100, {{3, 4}, {}, {}}}});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_TRUE(absl::IsNotFound(got[1].status())) << got[1].status();
}

INSTANTIATE_TEST_SUITE_P(
    Variants, RecurrentVsFullForward,
    ::testing::Values(Variant{"generalized",
                              [](PerformerLMConfig& c) { c.generalized_attention = true; }, 2e-5},
                      Variant{"softmax", [](PerformerLMConfig&) {}, 5e-2},
                      Variant{"local_heads",
                              [](PerformerLMConfig& c) {
                                c.generalized_attention = true;
                                c.local_attn_heads = {1};
                                c.local_window_size = 4;
                              },
                              2e-5},
                      Variant{"all_local_per_layer",
                              [](PerformerLMConfig& c) {
                                c.local_attn_heads = {2, 1};
                                c.local_window_size = 3;
                                c.generalized_attention = true;
                              },
                              2e-5},
                      Variant{"shift_reversible_scalenorm",
                              [](PerformerLMConfig& c) {
                                c.generalized_attention = true;
                                c.shift_tokens = true;
                                c.reversible = true;
                                c.use_scalenorm = true;
                                c.qkv_bias = true;
                                c.attn_out_bias = true;
                              },
                              2e-5},
                      Variant{"rezero_axial_glu_tied",
                              [](PerformerLMConfig& c) {
                                c.generalized_attention = true;
                                c.use_rezero = true;
                                c.rotary_position_emb = false;
                                c.axial_position_emb = true;
                                c.axial_position_shape = std::vector<int64_t>{5, 8};
                                c.ff_glu = true;
                                c.tie_embed = true;
                              },
                              2e-5},
                      Variant{"no_projection",
                              [](PerformerLMConfig& c) {
                                c.no_projection = true;
                                c.rotary_position_emb = false;
                              },
                              2e-5}),
    [](const ::testing::TestParamInfo<Variant>& info) { return info.param.name; });

// State bytes: a closed form of the configuration, the same at every length.
TEST(PerformerDecoderTest, StateBytesPerSequenceIsExact) {
  PerformerLMConfig config = TinyLMConfig();
  config.local_attn_heads = {1};
  config.local_window_size = 4;
  config.shift_tokens = true;
  auto decoder = MakeDecoder(config);
  const int64_t m = config.resolved_nb_features(), d = 8, gh = 1, lh = 1;
  const int64_t per_layer_floats = gh * m * (d + 1)          // kv
                                   + gh                      // key max
                                   + gh * (d + 1)            // v sums and count
                                   + 2 * lh * 8 * d          // ring of 2w keys and values
                                   + int64_t{2} * (16 / 2);  // shifted pieces of both branches
  EXPECT_EQ(decoder->info().state_bytes_per_sequence, 2 * per_layer_floats * 4 + 8);
  // Known before a decoder is built (a server sizes its pool with it).
  EXPECT_EQ(PerformerDecoder::StateBytesPerSequence(RandomLM(config)),
            2 * per_layer_floats * 4 + 8);
}

TEST(PerformerDecoderTest, BatchedStepsDoNotDependOnBatchCompanions) {
  PerformerLMConfig config = TinyLMConfig();
  config.local_attn_heads = {1};
  config.local_window_size = 4;
  auto decoder = MakeDecoder(config, 8);
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4}, {5, 6, 7, 8, 9, 10}, {11, 12}};
  // Alone: each sequence by itself.
  std::vector<std::vector<torch::Tensor>> alone(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    SequenceId id = *decoder->Create();
    ASSERT_TRUE(decoder->Prefill(id, {prompts[s], {}, {}}).ok());
    for (int step = 0; step < 12; ++step) {
      alone[s].push_back((*decoder->Step({id}, {(step + static_cast<int>(s)) % 20}))[0]);
    }
    ASSERT_TRUE(decoder->Release(id).ok());
  }
  // Together, released in the middle (compaction), stepped in a shuffled
  // order and as a non-contiguous subset (gather path).
  std::vector<SequenceId> ids;
  SequenceId filler = *decoder->Create();
  ASSERT_TRUE(decoder->Prefill(filler, {{9, 9, 9}, {}, {}}).ok());
  for (const auto& p : prompts) {
    ids.push_back(*decoder->Create());
    ASSERT_TRUE(decoder->Prefill(ids.back(), {p, {}, {}}).ok());
  }
  for (int step = 0; step < 12; ++step) {
    if (step == 4) {
      ASSERT_TRUE(decoder->Release(filler).ok());
    }
    std::vector<SequenceId> batch = {ids[2], ids[0], ids[3], ids[1]};
    std::vector<size_t> which = {2, 0, 3, 1};
    if (step % 3 == 1) {  // a subset: every other sequence
      batch = {ids[3], ids[1]};
      which = {3, 1};
    }
    std::vector<int64_t> tokens;
    tokens.reserve(which.size());
    for (size_t s : which) tokens.push_back((step + static_cast<int>(s)) % 20);
    absl::StatusOr<torch::Tensor> out = decoder->Step(batch, tokens);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < which.size(); ++i) {
      SCOPED_TRACE("sequence " + std::to_string(which[i]) + " step " + std::to_string(step));
      EXPECT_TENSOR_CLOSE((*out)[static_cast<int64_t>(i)], alone[which[i]][step], 1e-5, 1e-5);
    }
    if (step % 3 == 1) {  // the others catch up alone
      for (size_t s : {size_t{0}, size_t{2}}) {
        absl::StatusOr<torch::Tensor> o =
            decoder->Step({ids[s]}, {(step + static_cast<int>(s)) % 20});
        ASSERT_TRUE(o.ok()) << o.status();
        EXPECT_TENSOR_CLOSE((*o)[0], alone[s][step], 1e-5, 1e-5);
      }
    }
  }
}

TEST(PerformerDecoderTest, ErrorsAreClear) {
  PerformerLMConfig config = TinyLMConfig();
  config.max_seq_len = 6;
  auto decoder = MakeDecoder(config, 2);
  SequenceId a = *decoder->Create();
  EXPECT_EQ(decoder->Step({a}, {1}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decoder->Prefill(a, {{}, {}, {}}).status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status bad_token = decoder->Prefill(a, {{1, 23}, {}, {}}).status();
  EXPECT_EQ(bad_token.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_token.message().find("outside the vocabulary [0, 23)"), std::string::npos)
      << bad_token;
  EXPECT_EQ(decoder->Prefill(a, {{1, 2, 3, 4, 5, 6, 7}, {}, {}}).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(decoder->Prefill(a, {{1}, {2}, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(decoder->Prefill(a, {{1, 2, 3, 4, 5}, {}, {}}).ok());
  EXPECT_EQ(decoder->Prefill(a, {{1}, {}, {}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  SequenceId b = *decoder->Create();
  EXPECT_EQ(decoder->Create().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(decoder->Step({a, a}, {1, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder->Step({a}, {1, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder->Step({999}, {1}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(decoder->Step({a}, {-1}).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(decoder->Step({a}, {1}).ok());  // position 5 -> 6
  absl::Status past_end = decoder->Step({a}, {1}).status();
  EXPECT_EQ(past_end.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(past_end.message().find("max_seq_len is 6"), std::string::npos) << past_end;
  EXPECT_EQ(decoder->info().max_seq_len, 6);
  ASSERT_TRUE(decoder->Release(b).ok());
  EXPECT_EQ(decoder->Release(b).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(decoder->active(), 1);
}

// Positions follow each sequence through Prefill, Extend, Step, a release
// that moves another sequence into the freed slot, and a new sequence in a
// reused slot (which starts at 0 whatever the slot held).
TEST(PerformerDecoderTest, PositionsFollowSequencesAcrossSlots) {
  auto decoder = MakeDecoder(TinyLMConfig(), 2);
  SequenceId a = *decoder->Create();
  SequenceId b = *decoder->Create();
  ASSERT_TRUE(decoder->Prefill(a, {{1, 2, 3}, {}, {}}).ok());
  ASSERT_TRUE(decoder->Prefill(b, {{4, 5, 6, 7, 8}, {}, {}}).ok());
  ASSERT_TRUE(decoder->Extend(b, {1, 2}).ok());
  ASSERT_TRUE(decoder->Step({b, a}, {3, 3}).ok());
  EXPECT_EQ(*decoder->Position(a), 4);
  EXPECT_EQ(*decoder->Position(b), 8);
  ASSERT_TRUE(decoder->Release(a).ok());  // b moves into a's slot
  EXPECT_EQ(*decoder->Position(b), 8);
  ASSERT_TRUE(decoder->Step({b}, {1}).ok());
  EXPECT_EQ(*decoder->Position(b), 9);
  SequenceId c = *decoder->Create();  // b's former slot, which held 8
  EXPECT_EQ(*decoder->Position(c), 0);
  ASSERT_TRUE(decoder->Prefill(c, {{9}, {}, {}}).ok());
  EXPECT_EQ(*decoder->Position(c), 1);
  EXPECT_EQ(*decoder->Position(b), 9);
}

TEST(PerformerDecoderTest, BidirectionalModelCannotDecode) {
  PerformerLMConfig config = TinyLMConfig();
  config.causal = false;
  absl::StatusOr<std::unique_ptr<PerformerDecoder>> d =
      PerformerDecoder::Create(RandomLM(config), 2);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PerformerDecoderTest, GenerateStopsAtMaxSeqLenAndEos) {
  PerformerLMConfig config = TinyLMConfig();
  config.max_seq_len = 8;
  auto decoder = MakeDecoder(config, 2);
  generation::SamplingParams greedy = generation::SamplingParams::Greedy();
  greedy.max_new_tokens = 100;
  absl::StatusOr<GenerationResult> r = Generate(*decoder, {{1, 2, 3}, {}, {}}, greedy);
  ASSERT_TRUE(r.ok()) << r.status();
  // Positions 3..7 are fed, the token after position 7 is still emitted.
  EXPECT_EQ(r->tokens.size(), 6u);
  EXPECT_EQ(r->finish, generation::FinishReason::kLength);
  greedy.eos_token_id = r->tokens[2];
  absl::StatusOr<GenerationResult> stopped = Generate(*decoder, {{1, 2, 3}, {}, {}}, greedy);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->finish, generation::FinishReason::kEos);
  EXPECT_EQ(stopped->tokens.back(), r->tokens[2]);
  EXPECT_LE(stopped->tokens.size(), 3u);
  EXPECT_EQ(decoder->active(), 0);
}

TEST(PerformerDecoderTest, SeededSamplingIsReproducible) {
  auto decoder = MakeDecoder(TinyLMConfig(), 2);
  generation::SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 10;
  p.seed = 1234;
  p.max_new_tokens = 20;
  absl::StatusOr<GenerationResult> a = Generate(*decoder, {{1, 2}, {}, {}}, p);
  absl::StatusOr<GenerationResult> b = Generate(*decoder, {{1, 2}, {}, {}}, p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  p.seed = 4321;
  absl::StatusOr<GenerationResult> c = Generate(*decoder, {{1, 2}, {}, {}}, p);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->tokens, c->tokens);
}

}  // namespace
}  // namespace performer::decoding

namespace performer::decoding {
namespace {

// A float64 model takes the tensor-op form of the step (the fused CPU
// kernel is float32 only, like the path devices without it take); both
// forms must agree.
TEST(PerformerDecoderTest, TensorOpStepMatchesFusedKernelStep) {
  for (bool generalized : {false, true}) {
    PerformerLMConfig config = TinyLMConfig();
    config.generalized_attention = generalized;
    config.local_attn_heads = {1};
    config.local_window_size = 4;
    models::LoadedModel wide = RandomLM(config, 11);
    wide.lm->to(torch::kDouble);
    auto fused = *PerformerDecoder::Create(RandomLM(config, 11), 2);
    auto tensor_ops = *PerformerDecoder::Create(std::move(wide), 2);
    SequenceId a = *fused->Create(), b = *tensor_ops->Create();
    ASSERT_TRUE(fused->Prefill(a, {{1, 2, 3}, {}, {}}).ok());
    ASSERT_TRUE(tensor_ops->Prefill(b, {{1, 2, 3}, {}, {}}).ok());
    for (int step = 0; step < 20; ++step) {
      const int64_t token = (step * 5 + 1) % config.num_tokens;
      torch::Tensor x = (*fused->Step({a}, {token}))[0];
      torch::Tensor y = (*tensor_ops->Step({b}, {token}))[0];
      EXPECT_EQ(y.scalar_type(), torch::kDouble);
      SCOPED_TRACE("step " + std::to_string(step));
      // float64 has no scan: its prompt runs one chunkwise prefill, whose
      // softmax-kernel stabiliser is the prompt's maximum, not each token's
      // running one (FastAttentionImpl::Extend).
      EXPECT_TENSOR_CLOSE(x, y.to(torch::kFloat), generalized ? 2e-4 : 5e-3, 1e-4);
    }
  }
}

}  // namespace
}  // namespace performer::decoding

namespace performer::decoding {
namespace {

// PerformerLM::Extend reads the sequence's position from the state when the
// caller gives none (the decoder gives its host copy): both give the logits
// of the local-head chunk at the right window.
TEST(PerformerLMExtendTest, WithoutAHostStartReadsThePositionFromTheState) {
  PerformerLMConfig config = TinyLMConfig();
  config.local_attn_heads = {1};
  config.local_window_size = 4;
  models::LoadedModel model = RandomLM(config, 3);
  models::PerformerLM lm = model.lm;
  c10::InferenceMode guard;
  const torch::Tensor prompt = torch::tensor({{3, 1, 4, 1, 5, 9, 2}}, torch::kLong);
  const torch::Tensor chunk = torch::tensor({6, 5, 3}, torch::kLong);
  StatePool pool = lm->AllocateState(2);
  const std::vector<SlotRows> given = pool.Rows(0, 1, 10), read = pool.Rows(1, 1, 10);
  for (const std::vector<SlotRows>* state : {&given, &read}) {
    models::LMForwardOptions options;
    options.capture = state;
    (void)lm->forward(prompt, options);
  }
  const torch::Tensor a = lm->Extend(chunk, given, /*start=*/7);
  const torch::Tensor b = lm->Extend(chunk, read);
  EXPECT_TENSOR_CLOSE(b, a, 0.0, 0.0);
  // Both equal the full forward's logits at the chunk's last position.
  const torch::Tensor full = lm->forward(torch::cat({prompt, chunk.unsqueeze(0)}, 1));
  EXPECT_TENSOR_CLOSE(a, full[0][9], 1e-5, 1e-4);
  EXPECT_EQ(read.front().positions[0].item<int64_t>(), 10);
}

// The decoder prepares tables the model's own forward also reads; a caller
// that keeps training or scoring with autograd must still be able to.
TEST(PerformerDecoderTest, ModelStillTrainsAfterADecoderIsCreated) {
  models::LoadedModel model = RandomLM(TinyLMConfig());
  models::PerformerLM lm = model.lm;
  auto decoder = *PerformerDecoder::Create(std::move(model), 2);
  torch::Tensor logits = lm(torch::tensor({{1, 2, 3, 4}}, torch::kLong));
  logits.sum().backward();
  EXPECT_TRUE(lm->parameters()[0].grad().defined());
}

}  // namespace
}  // namespace performer::decoding

namespace performer::decoding {
namespace {

// On a GPU, steps that replay the captured CUDA graphs give the logits of
// eager steps: every live sequence stepping (buckets 1, 2, 4 with padding
// rows), after a release (rows moved), and a subset stepping (eager).
// graph_kernel: the CUDA decode-step kernel captured in the graphs (the
// eager steps run the default, which at these few rows is kRowBlocks).
void ExpectGraphStepsEqualEagerSteps(
    const PerformerLMConfig& config,
    kernels::CudaStepKernel graph_kernel = kernels::CudaStepKernel::kRowBlocks) {
  auto on_gpu = [&] {
    models::LoadedModel model = RandomLM(config, 5);
    model.lm->to(torch::kCUDA);
    return model;
  };
  PerformerDecoderOptions eager_options;
  eager_options.cuda_graphs = false;
  auto graphs = [&] {
    const kernels::ScopedCudaStepKernel selected(graph_kernel);
    return *PerformerDecoder::Create(on_gpu(), 4);
  }();
  auto eager = *PerformerDecoder::Create(on_gpu(), 4, eager_options);
  ASSERT_TRUE(graphs->info().cuda_graphs) << graphs->cuda_graphs_status();
  EXPECT_FALSE(eager->info().cuda_graphs);
  std::vector<SequenceId> g, e;
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4}, {5, 6, 7, 8, 9}};
  for (const auto& prompt : prompts) {
    g.push_back(*graphs->Create());
    e.push_back(*eager->Create());
    ASSERT_TRUE(graphs->Prefill(g.back(), {prompt, {}, {}}).ok());
    ASSERT_TRUE(eager->Prefill(e.back(), {prompt, {}, {}}).ok());
  }
  auto step_both = [&](const std::vector<size_t>& which, int step) {
    std::vector<SequenceId> gi, ei;
    std::vector<int64_t> tokens;
    for (size_t i : which) {
      gi.push_back(g[i]);
      ei.push_back(e[i]);
      tokens.push_back((static_cast<int64_t>(step) * 7 + static_cast<int64_t>(i) * 3 + 1) %
                       config.num_tokens);
    }
    absl::StatusOr<torch::Tensor> x = graphs->Step(gi, tokens);
    absl::StatusOr<torch::Tensor> y = eager->Step(ei, tokens);
    ASSERT_TRUE(x.ok() && y.ok()) << x.status() << " / " << y.status();
    SCOPED_TRACE("step " + std::to_string(step) + " of " + std::to_string(which.size()));
    EXPECT_TENSOR_CLOSE(*x, *y, 1e-5, 1e-5);
  };
  for (int step = 0; step < 6; ++step) step_both({2, 0, 1}, step);  // bucket 4, one padding row
  ASSERT_TRUE(graphs->Release(g[0]).ok());                          // the last row moves into row 0
  ASSERT_TRUE(eager->Release(e[0]).ok());
  for (int step = 6; step < 12; ++step) step_both({1, 2}, step);  // bucket 2
  for (int step = 12; step < 15; ++step) step_both({2}, step);    // a subset: eager
  ASSERT_TRUE(graphs->Release(g[1]).ok());
  ASSERT_TRUE(eager->Release(e[1]).ok());
  for (int step = 15; step < 20; ++step) step_both({2}, step);  // bucket 1
  EXPECT_EQ(*graphs->Position(g[2]), *eager->Position(e[2]));
}

TEST(PerformerDecoderCudaTest, GraphStepsEqualEagerSteps) {
  PERFORMER_REQUIRE_CUDA();
  ExpectGraphStepsEqualEagerSteps(TinyLMConfig());
}

TEST(PerformerDecoderCudaTest, GraphStepsEqualEagerStepsWithLocalHeads) {
  PERFORMER_REQUIRE_CUDA();
  PerformerLMConfig config = TinyLMConfig();
  config.local_attn_heads = {1};
  config.local_window_size = 4;
  ExpectGraphStepsEqualEagerSteps(config);
}

// Graphs captured with the vector step kernel (a split per row at these
// batch sizes) against eager steps of the row-block kernel.
TEST(PerformerDecoderCudaTest, VectorStepKernelGraphsEqualRowBlockEagerSteps) {
  PERFORMER_REQUIRE_CUDA();
  PerformerLMConfig config = TinyLMConfig();  // M 16, E + 1 = 9: whole vectors
  ExpectGraphStepsEqualEagerSteps(config, kernels::CudaStepKernel::kVectorSplit);
  config.local_attn_heads = {1};
  config.local_window_size = 4;
  ExpectGraphStepsEqualEagerSteps(config, kernels::CudaStepKernel::kVectorSplit);
}

// Graphs captured with the cluster step kernel (8 blocks per row, M 16: two
// features each) against eager steps of the row-block kernel.
TEST(PerformerDecoderCudaTest, ClusterStepKernelGraphsEqualRowBlockEagerSteps) {
  PERFORMER_REQUIRE_CUDA();
  ExpectGraphStepsEqualEagerSteps(TinyLMConfig(), kernels::CudaStepKernel::kClusterSplit);
}

TEST(PerformerDecoderTest, NoCudaGraphsOnTheCpu) {
  auto decoder = *PerformerDecoder::Create(RandomLM(TinyLMConfig()), 2);
  EXPECT_FALSE(decoder->info().cuda_graphs);
  EXPECT_TRUE(decoder->cuda_graphs_status().ok());
}

// A snapshot restored into another sequence (another slot, after the pool
// moved rows around) continues bit for bit as the original: local heads'
// rings, token shift and the softmax kernel's running maximum included.
TEST(PerformerDecoderTest, ARestoredSnapshotContinuesExactly) {
  PerformerLMConfig config = TinyLMConfig();
  config.local_attn_heads = {1};
  config.local_window_size = 4;
  config.shift_tokens = true;
  auto decoder = *PerformerDecoder::Create(RandomLM(config), 4);
  const SequenceId other = *decoder->Create();
  ASSERT_TRUE(decoder->Prefill(other, {{2, 2}, {}, {}}).ok());
  const SequenceId original = *decoder->Create();
  ASSERT_TRUE(decoder->Prefill(original, {{3, 1, 4, 1, 5, 9, 2}, {}, {}}).ok());
  ASSERT_TRUE(decoder->Step({original}, {6}).ok());
  absl::StatusOr<StateSnapshot> snapshot = decoder->Snapshot(original);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->position, 8);
  EXPECT_EQ(snapshot->bytes(), decoder->info().state_bytes_per_sequence);
  ASSERT_TRUE(decoder->Release(other).ok());  // the original moves to slot 0
  const SequenceId copy = *decoder->Create();
  ASSERT_TRUE(decoder->CheckSnapshot(*snapshot).ok());
  ASSERT_TRUE(decoder->Restore(copy, *snapshot).ok());
  EXPECT_EQ(*decoder->Position(copy), 8);
  for (int64_t token : {5, 3, 5, 8, 9, 7}) {
    absl::StatusOr<torch::Tensor> both = decoder->Step({original, copy}, {token, token});
    ASSERT_TRUE(both.ok()) << both.status();
    EXPECT_TRUE(torch::equal((*both)[0], (*both)[1])) << "token " << token;
  }
  absl::StatusOr<torch::Tensor> a = decoder->Extend(original, {1, 2, 3});
  absl::StatusOr<torch::Tensor> b = decoder->Extend(copy, {1, 2, 3});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(*a, *b));
}

TEST(PerformerDecoderTest, SnapshotAndRestoreCheckTheirArguments) {
  auto decoder = *PerformerDecoder::Create(RandomLM(TinyLMConfig()), 2);
  const SequenceId fresh = *decoder->Create();
  EXPECT_EQ(decoder->Snapshot(fresh).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(decoder->Snapshot(999).status().code(), absl::StatusCode::kNotFound);
  const SequenceId done = *decoder->Create();
  ASSERT_TRUE(decoder->Prefill(done, {{1, 2, 3}, {}, {}}).ok());
  StateSnapshot snapshot = *decoder->Snapshot(done);
  EXPECT_EQ(decoder->Restore(done, snapshot).code(), absl::StatusCode::kFailedPrecondition);
  StateSnapshot far = snapshot;
  far.position = decoder->info().max_seq_len + 1;
  EXPECT_EQ(decoder->Restore(fresh, far).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(decoder->CheckSnapshot(far).code(), absl::StatusCode::kOutOfRange);
  StateSnapshot reshaped = snapshot;
  reshaped.layers.front().front() = torch::zeros({1});
  EXPECT_EQ(decoder->Restore(fresh, reshaped).code(), absl::StatusCode::kInvalidArgument);
  // A refused restore leaves the sequence new: a good one still goes in.
  EXPECT_TRUE(decoder->Restore(fresh, snapshot).ok());
  EXPECT_EQ(*decoder->Position(fresh), 3);
}

}  // namespace
}  // namespace performer::decoding
