// Attention masks with the semantics of fast-transformers' masking module.
//
// Convention: true / 1 = the position is kept (may be attended). A Mask is a
// value type holding a boolean matrix plus, for length masks, the lengths it
// was built from. The three constructors mirror the Python classes:
//
//   Mask::Full(n, m)            FullMask(N, M): all-true n x m (all_ones preset)
//   Mask::FromBool(t)           FullMask(bool tensor): cloned, any shape
//   Mask::Lengths(len, max)     LengthMask(lengths, max_len): row n keeps j < len[n]
//   Mask::TriangularCausal(n)   TriangularCausalMask(n): lengths 1..n, max_len n
//
// Derived matrices (float, additive, additive-finite) are computed on demand.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace performer {

class Mask {
 public:
  enum class Kind { kFull, kLength, kTriangularCausal };

  // FullMask(n, m): an all-true n x m matrix.
  static Mask Full(int64_t n, int64_t m, torch::Device device = torch::kCPU);
  // FullMask(n): an all-true n x n matrix.
  static Mask Full(int64_t n, torch::Device device = torch::kCPU) { return Full(n, n, device); }
  // FullMask(mask): the tensor must be bool (InvalidArgument otherwise).
  static absl::StatusOr<Mask> FromBool(const torch::Tensor& mask);
  // LengthMask(lengths, max_len): lengths is an int64 vector (N,); max_len
  // defaults to lengths.max() (also when 0 is given, as in Python).
  static Mask Lengths(const torch::Tensor& lengths, std::optional<int64_t> max_len = std::nullopt,
                      std::optional<torch::Device> device = std::nullopt);
  // TriangularCausalMask(n): n x n lower-triangular, diagonal included.
  static Mask TriangularCausal(int64_t n, torch::Device device = torch::kCPU);

  Kind kind() const { return kind_; }
  const char* class_name() const;

  // The boolean matrix (true = keep).
  const torch::Tensor& bool_matrix() const { return bool_matrix_; }
  // 1.0 keep / 0.0 drop, float32.
  torch::Tensor float_matrix() const;
  // log(float_matrix): 0 keep / -inf drop, float32.
  torch::Tensor additive_matrix() const;
  // (not keep) * -1e24: -0.0 keep / -1e24 drop, float32.
  torch::Tensor additive_matrix_finite() const;

  // Number of kept positions per row. For masks built from lengths this is
  // the stored vector (no validation, as in Python); for a boolean mask it is
  // derived and fails unless every row is a run of trues followed only by
  // falses ("The mask is not a length mask").
  absl::StatusOr<torch::Tensor> lengths() const;
  bool is_length_mask() const { return lengths().ok(); }

  // Every element is kept.
  bool all_ones() const { return all_ones_; }
  // lengths() exists, is 1-D and equals [1, 2, ..., n].
  bool lower_triangular() const;

  std::vector<int64_t> shape() const { return bool_matrix_.sizes().vec(); }
  torch::Device device() const { return bool_matrix_.device(); }
  // A copy of the mask on another device.
  Mask To(torch::Device device) const;

 private:
  Mask(Kind kind, torch::Tensor bool_matrix, torch::Tensor lengths, bool all_ones);

  Kind kind_;
  torch::Tensor bool_matrix_;
  torch::Tensor lengths_;  // Undefined unless built from lengths.
  bool all_ones_;
};

}  // namespace performer
