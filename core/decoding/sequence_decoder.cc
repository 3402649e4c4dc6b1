#include "core/decoding/sequence_decoder.h"

namespace performer::decoding {

std::vector<absl::StatusOr<torch::Tensor>> SequenceDecoder::PrefillBatch(
    const std::vector<PrefillItem>& items) {
  std::vector<absl::StatusOr<torch::Tensor>> results;
  results.reserve(items.size());
  for (const PrefillItem& item : items) results.push_back(Prefill(item.id, item.request));
  return results;
}

absl::StatusOr<StateSnapshot> SequenceDecoder::Snapshot(SequenceId /*id*/) const {
  return absl::UnimplementedError(info().model_class + " decoding keeps no state to take out");
}

absl::Status SequenceDecoder::Restore(SequenceId /*id*/, const StateSnapshot& /*snapshot*/) {
  return absl::UnimplementedError(info().model_class + " decoding cannot restore a state");
}

absl::Status SequenceDecoder::CheckSnapshot(const StateSnapshot& /*snapshot*/) const {
  return absl::UnimplementedError(info().model_class + " decoding cannot restore a state");
}

}  // namespace performer::decoding
