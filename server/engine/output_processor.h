// The engine's output stage: turns logits into tokens and tokens into what
// the client sees. For a batch of sequences it samples every row at once
// (generation::SampleBatch: batched tensor ops on the logits' device, each
// row with its own seeded generator), applies the stop rules (tokens and
// strings), detokenizes, computes log-probabilities where asked, and appends
// to each request's stream; at the end it writes the request's summary.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/generation/token_sampler.h"
#include "server/engine/engine_observer.h"
#include "server/engine/scheduler.h"
#include "server/engine/text_output.h"

namespace performer::server {

class Tokenizer;

// Per sequence: its sampler, its text and the tokens so far (prompt +
// generated, for the repetition penalty).
struct SequenceOutput {
  explicit SequenceOutput(const generation::SamplingParams& params)
      : sampler(params), stop_tokens(params.stop_token_ids) {}
  generation::TokenSampler sampler;
  generation::StopTokenSet stop_tokens;
  std::unique_ptr<TextOutput> text;  // null without a tokenizer
  std::vector<int64_t> context;
};

class OutputProcessor {
 public:
  // `tokenizer` (may be null: token ids only) and `observer` (may be null)
  // are not owned and must outlive the processor. `stream_messages_per_step`
  // > 0: an Emit of n sequences asks their streams for messages of at least
  // ceil(n / stream_messages_per_step) tokens (RequestStream::Append), so
  // that the messages per step stay about that many however many stream;
  // 0: every stream's own interval.
  OutputProcessor(const Tokenizer* tokenizer, int64_t max_seq_len, EngineObserver* observer,
                  int64_t stream_messages_per_step = 0);

  // Gives a sequence its output state, before its first token.
  void Attach(ScheduledSequence& sequence) const;
  // Emits one token for each of `sequences` (not finished, attached), drawn
  // from row i of the logits. A sequence that meets a stop rule, or
  // whose reader has fallen too far behind, is ended. Returns the number of
  // tokens the streams accepted.
  // `logits` holds the rows in order, as one [n, vocab] tensor or as
  // several whose rows add up to n.
  int64_t Emit(const std::vector<ScheduledSequence*>& sequences,
               const std::vector<torch::Tensor>& logits);
  // Reports an ended sequence to its stream and the observer (once).
  void Finish(ScheduledSequence& sequence) const;

 private:
  // False when the stream refused the token (slow reader).
  bool EmitOne(ScheduledSequence& sequence, int64_t token, const float* logprob, absl::Time now,
               int64_t load_tokens_per_message);

  const Tokenizer* tokenizer_;
  const int64_t max_seq_len_;
  EngineObserver* observer_;
  const int64_t stream_messages_per_step_;
};

}  // namespace performer::server
