#include "core/training/text_dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace performer::training {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv1a(std::string_view bytes, uint64_t hash = kFnvOffset) {
  for (unsigned char c : bytes) hash = (hash ^ c) * kFnvPrime;
  return hash;
}

}  // namespace

absl::StatusOr<TextDataset> TextDataset::FromText(std::string_view text, double val_fraction) {
  if (text.empty()) return absl::InvalidArgumentError("the training corpus is empty");
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction must be in [0, 1), got ", val_fraction));
  }
  const int64_t n = static_cast<int64_t>(text.size());
  const int64_t n_val = static_cast<int64_t>(std::llround(val_fraction * static_cast<double>(n)));
  if (n_val >= n) {
    return absl::InvalidArgumentError(absl::StrCat("val_fraction ", val_fraction, " of ", n,
                                                   " bytes leaves nothing to train on"));
  }
  torch::Tensor bytes =
      torch::from_blob(const_cast<char*>(text.data()), {n}, torch::kUInt8).to(torch::kLong);
  const std::string split = absl::StrCat("|", n - n_val);
  return TextDataset(bytes.narrow(0, 0, n - n_val).clone(),
                     bytes.narrow(0, n - n_val, n_val).clone(), Fnv1a(split, Fnv1a(text)));
}

absl::StatusOr<TextDataset> TextDataset::FromFiles(const std::vector<std::string>& paths,
                                                   double val_fraction) {
  if (paths.empty()) return absl::InvalidArgumentError("no corpus file given");
  std::string text;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    std::ostringstream contents;
    contents << in.rdbuf();
    if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
    text += contents.str();
  }
  return FromText(text, val_fraction);
}

torch::Tensor TextDataset::ValidationWindows(int64_t length, int64_t max_windows) const {
  const int64_t n_val = validation_.size(0);
  const int64_t available = length > 0 ? n_val / length : 0;
  const int64_t count = std::min(max_windows, available);
  if (count <= 0) return torch::empty({0, std::max<int64_t>(length, 0)}, torch::kLong);
  // Window i starts at floor(i * (n_val - length) / max(1, count - 1)): the
  // first at 0, the last at the end; non-overlapping since count <= n_val / length.
  std::vector<torch::Tensor> windows;
  windows.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = count == 1 ? 0 : i * (n_val - length) / (count - 1);
    windows.push_back(validation_.narrow(0, start, length));
  }
  return torch::stack(windows);
}

}  // namespace performer::training
