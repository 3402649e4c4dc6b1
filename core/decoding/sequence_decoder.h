// The interface through which a serving engine decodes with a model,
// independent of the server: create a sequence, prefill it with a prompt
// (returns the logits that predict the next token), step a batch of
// sequences by one token each (returns a batch of logits), release it.
//
// Each sequence carries a constant-size state (info().state_bytes_per_sequence,
// exact, whatever its length), so admission is a simple count against
// info().capacity. Implementations are not thread-safe: one engine thread
// owns a decoder.
//
// Errors: InvalidArgument for bad tokens / requests, OutOfRange for
// positions past max_seq_len, NotFound for unknown sequence ids,
// FailedPrecondition for calls out of order, ResourceExhausted when every
// slot is taken.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/recurrent/state_snapshot.h"

namespace performer::decoding {

using SequenceId = uint64_t;

struct DecoderInfo {
  std::string model_class;  // the model class's name (models::ModelClassName), for messages
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;    // positions 0 .. max_seq_len-1 can be fed
  bool needs_source = false;  // encoder-decoder: Prefill needs a source
  int64_t source_vocab_size = 0;
  int64_t max_source_len = 0;
  int64_t state_bytes_per_sequence = 0;
  int64_t capacity = 0;  // sequences that can be live at once
  // Steps of every live sequence replay a captured CUDA graph (GPU only;
  // decoding/cuda_step_graphs.h).
  bool cuda_graphs = false;
  // The dtype of the decode step's projection weights ("fp32", "bf16":
  // models::WeightDtypeName) and the bytes of all of the model's weights
  // where it runs (parameters, buffers and decode copies, each storage once).
  std::string weight_dtype = "fp32";
  int64_t weight_bytes = 0;
};

struct PrefillRequest {
  std::vector<int64_t> prompt;  // decoder prompt (for enc-dec: the start token(s))
  std::vector<int64_t> source;  // encoder input (enc-dec only)
  // Encoder padding mask (true = real token); empty = no mask, as the
  // reference's generate() without enc_mask.
  std::vector<bool> source_mask;
};

struct PrefillItem {
  SequenceId id = 0;
  PrefillRequest request;
};

class SequenceDecoder {
 public:
  virtual ~SequenceDecoder() = default;

  virtual const DecoderInfo& info() const = 0;
  virtual absl::StatusOr<SequenceId> Create() = 0;
  // Logits [vocab] (float32, CPU) predicting the token after the prompt.
  virtual absl::StatusOr<torch::Tensor> Prefill(SequenceId id, const PrefillRequest& request) = 0;
  // Prefills created sequences, each as Prefill(item.id, item.request)
  // would, and returns one result per item, in order: the logits [vocab]
  // (float32, CPU) after its prompt, or why its prefill failed. A decoder
  // may run several as one batch (one forward costs less than several on a
  // CPU); a failure of that batch is every one of its items' result. The
  // default prefills them one by one.
  virtual std::vector<absl::StatusOr<torch::Tensor>> PrefillBatch(
      const std::vector<PrefillItem>& items);
  // Chunked prefill: feeds more prompt tokens to one prefilled sequence and
  // returns the logits [vocab] after the last. Prefill(a) then Extend(b) is
  // Prefill(a + b) up to the recurrent form's rounding (and, for softmax-
  // kernel heads, the chunk's key stabiliser), at a cost per token close to
  // a forward's (each layer runs on the whole chunk).
  virtual absl::StatusOr<torch::Tensor> Extend(SequenceId id,
                                               const std::vector<int64_t>& tokens) = 0;
  // Feeds tokens[i] to sequence ids[i]; logits [ids.size(), vocab].
  virtual absl::StatusOr<torch::Tensor> Step(const std::vector<SequenceId>& ids,
                                             const std::vector<int64_t>& tokens) = 0;
  virtual absl::Status Release(SequenceId id) = 0;

  // A copy of the whole state of a prefilled sequence, on the model's
  // device (StateSnapshot::OnHost moves it out): what it would continue
  // from. Unimplemented for a decoder that cannot take its state out.
  virtual absl::StatusOr<StateSnapshot> Snapshot(SequenceId id) const;
  // Gives a created, not yet prefilled sequence the state of `snapshot`
  // (its position included), which must come from a decoder of the same
  // model: the sequence then continues (Extend, Step) exactly as the one
  // the snapshot was taken from. InvalidArgument when the snapshot's layout
  // is not this model's, OutOfRange for a position past max_seq_len.
  virtual absl::Status Restore(SequenceId id, const StateSnapshot& snapshot);
  // Whether Restore would take `snapshot`'s layout (layers, shapes, dtypes)
  // and position, without a sequence: InvalidArgument / OutOfRange as above.
  // Unlike the other calls it may run on any thread, beside the owner's
  // (it reads only what is fixed when the decoder is built).
  virtual absl::Status CheckSnapshot(const StateSnapshot& snapshot) const;

  // Tokens consumed so far by a sequence.
  virtual absl::StatusOr<int64_t> Position(SequenceId id) const = 0;
  virtual int64_t active() const = 0;
};

}  // namespace performer::decoding
