#include "core/decoding/token_ids.h"

#include "absl/strings/str_cat.h"

namespace performer::decoding {

absl::Status CheckTokenIds(const std::vector<int64_t>& ids, int64_t vocab,
                           absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] is ", ids[i],
                                                     ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace performer::decoding
