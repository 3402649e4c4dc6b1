// The engine's runner: feeds the scheduler's prompt chunks and decode
// batches to the model's SequenceDecoder. Every call returns the decoder's
// status (RESOURCE_EXHAUSTED for out of memory, INTERNAL for a failure,
// with the model's message); whatever a decoder throws is turned into one
// here too (decoding/status_from_exception.h), so a failing model fails
// the requests of that call and never the process.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/decoding/sequence_decoder.h"
#include "server/engine/scheduler.h"

namespace performer::server {

// A state a sequence resumes from instead of prefilling its prompt from
// the start: a cached prefix's (with the logits after it when it covers
// the whole prompt) or its session's.
struct ResumePoint {
  std::shared_ptr<const StateSnapshot> state;
  torch::Tensor logits;  // [vocab], or undefined
};

class ModelRunner {
 public:
  explicit ModelRunner(std::unique_ptr<decoding::SequenceDecoder> decoder);

  const decoding::DecoderInfo& info() const { return decoder_->info(); }

  // Feeds one prompt chunk. A first chunk takes a slot (Create) and runs
  // Prefill with the request's source, or for a sequence with a resume
  // point restores its state and Extends the chunk (an empty chunk returns
  // the point's logits); the others Extend. Returns the logits [vocab]
  // after the chunk's last token. On error the sequence keeps the slot it
  // may have got until Release.
  absl::StatusOr<torch::Tensor> Prefill(const PrefillChunk& chunk);
  // Prefills Batchable chunks (PrefillChunk::Batchable), each taking a
  // slot (in order, so that the decoder may run them as one batch:
  // SequenceDecoder::PrefillBatch); one result per chunk, as Prefill's. A
  // sequence whose prefill failed keeps the slot it may have got until
  // Release.
  std::vector<absl::StatusOr<torch::Tensor>> PrefillFirst(
      const std::vector<const PrefillChunk*>& chunks);
  // One batched step feeding each sequence its last sampled token; logits
  // [batch.size(), vocab], rows in batch order.
  absl::StatusOr<torch::Tensor> Step(const std::vector<ScheduledSequence*>& batch);
  // A copy of the state of the sequence's slot, on the model's device.
  absl::StatusOr<StateSnapshot> Snapshot(const ScheduledSequence& sequence) const;
  // Whether `snapshot` fits this model's state layout.
  absl::Status CheckSnapshot(const StateSnapshot& snapshot) const;
  // Frees the sequence's slot, if it has one.
  void Release(ScheduledSequence& sequence);

 private:
  // Creates the chunk's sequence in the decoder: `s` then holds a slot.
  absl::Status TakeSlot(ScheduledSequence& s);

  std::unique_ptr<decoding::SequenceDecoder> decoder_;
};

}  // namespace performer::server
