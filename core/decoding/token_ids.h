// The one check that token ids fit a vocabulary, shared by the decoder, the
// serving engine and the embedder so that every layer words it the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace performer::decoding {

// InvalidArgument "<field>[i] is <id>, outside the vocabulary [0, vocab)" for
// the first id outside [0, vocab); OK otherwise.
absl::Status CheckTokenIds(const std::vector<int64_t>& ids, int64_t vocab, absl::string_view field);

}  // namespace performer::decoding
