// A byte-level text corpus for training a language model, split into a
// training part and a validation part.
//
// Tokens are the bytes of the text (0..255): the tokenizer a model folder
// declares with tokenizer.json {"type": "byte"}. Several files are
// concatenated in the order given. The split is contiguous: the last
// round(val_fraction * size) tokens are the validation part, the rest the
// training part, so no validation window overlaps a training window.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace performer::training {

class TextDataset {
 public:
  // val_fraction in [0, 1). InvalidArgument for an empty corpus or a
  // fraction outside the range.
  static absl::StatusOr<TextDataset> FromText(std::string_view text, double val_fraction);
  // NotFound / InvalidArgument naming the file that cannot be read.
  static absl::StatusOr<TextDataset> FromFiles(const std::vector<std::string>& paths,
                                               double val_fraction);

  // int64 [n_train] and [n_val] (the latter may be empty).
  const torch::Tensor& train() const { return train_; }
  const torch::Tensor& validation() const { return validation_; }
  int64_t size() const { return train_.size(0) + validation_.size(0); }

  // FNV-1a over the tokens and the split point: a resumed run checks that
  // it trains on the same data.
  uint64_t fingerprint() const { return fingerprint_; }

  // Deterministic validation windows of `length` tokens, [w, length] int64:
  // w = min(max_windows, n_val / length) non-overlapping windows spread
  // evenly over the validation part (w = 0 when it is shorter than length).
  torch::Tensor ValidationWindows(int64_t length, int64_t max_windows) const;

 private:
  TextDataset(torch::Tensor train, torch::Tensor validation, uint64_t fingerprint)
      : train_(std::move(train)), validation_(std::move(validation)), fingerprint_(fingerprint) {}

  torch::Tensor train_;
  torch::Tensor validation_;
  uint64_t fingerprint_;
};

}  // namespace performer::training
