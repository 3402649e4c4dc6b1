#include "core/transformers/make_mirror.h"

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace performer {

absl::Status MakeMirror(const torch::nn::Module& src, torch::nn::Module& dst) {
  const auto src_params = src.named_parameters(/*recurse=*/true);
  auto dst_params = dst.named_parameters(/*recurse=*/true);
  std::vector<std::string> problems;
  for (const auto& item : src_params) {
    const torch::Tensor* target = dst_params.find(item.key());
    if (target == nullptr) {
      problems.push_back(absl::StrCat("'", item.key(), "' is missing"));
    } else if (target->sizes() != item.value().sizes() ||
               target->scalar_type() != item.value().scalar_type()) {
      std::ostringstream what;
      what << "'" << item.key() << "' is " << target->sizes() << " " << target->scalar_type()
           << " instead of " << item.value().sizes() << " " << item.value().scalar_type();
      problems.push_back(what.str());
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot mirror the parameters of ", src.name(),
                                                   " into ", dst.name(), ": ",
                                                   absl::StrJoin(problems, "; ")));
  }
  for (const auto& item : src_params) {
    // set_data swaps the storage under the existing handle, so every alias
    // of dst's parameter (module members included) sees the shared weights.
    dst_params.find(item.key())->set_data(item.value());
  }
  return absl::OkStatus();
}

}  // namespace performer
