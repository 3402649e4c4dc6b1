#include "core/decoding/sequence_decoder.h"

namespace performer::decoding {

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
