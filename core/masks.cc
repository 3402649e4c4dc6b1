#include "core/masks.h"

#include <torch/torch.h>

#include "absl/status/status.h"

namespace performer {

Mask::Mask(Kind kind, torch::Tensor bool_matrix, torch::Tensor lengths, bool all_ones)
    : kind_(kind),
      bool_matrix_(std::move(bool_matrix)),
      lengths_(std::move(lengths)),
      all_ones_(all_ones) {}

Mask Mask::Full(int64_t n, int64_t m, torch::Device device) {
  return Mask(Kind::kFull, torch::ones({n, m}, torch::dtype(torch::kBool).device(device)), {},
              /*all_ones=*/true);
}

absl::StatusOr<Mask> Mask::FromBool(const torch::Tensor& mask) {
  if (!mask.defined() || mask.scalar_type() != torch::kBool) {
    return absl::InvalidArgumentError("FullMask expects the mask to be bool");
  }
  const bool all = mask.numel() == 0 || mask.all().item<bool>();
  return Mask(Kind::kFull, mask.clone(), {}, all);
}

Mask Mask::Lengths(const torch::Tensor& lengths, std::optional<int64_t> max_len,
                   std::optional<torch::Device> device) {
  torch::Tensor len = lengths.to(torch::kLong);
  if (device) len = len.to(*device);
  int64_t max = max_len.value_or(0);
  if (max == 0) max = len.numel() > 0 ? len.max().item<int64_t>() : 0;
  torch::Tensor cols = torch::arange(max, len.options());
  torch::Tensor matrix = cols.unsqueeze(0) < len.unsqueeze(-1);
  const bool all = len.numel() == 0 || (len == max).all().item<bool>();
  return Mask(Kind::kLength, matrix, len, all);
}

Mask Mask::TriangularCausal(int64_t n, torch::Device device) {
  torch::Tensor len = torch::arange(1, n + 1, torch::dtype(torch::kLong).device(device));
  Mask mask = Lengths(len, n);
  mask.kind_ = Kind::kTriangularCausal;
  mask.all_ones_ = n == 1;
  return mask;
}

const char* Mask::class_name() const {
  switch (kind_) {
    case Kind::kFull:
      return "FullMask";
    case Kind::kLength:
      return "LengthMask";
    case Kind::kTriangularCausal:
      return "TriangularCausalMask";
  }
  return "Mask";
}

torch::Tensor Mask::float_matrix() const { return bool_matrix_.to(torch::kFloat); }

torch::Tensor Mask::additive_matrix() const { return float_matrix().log(); }

torch::Tensor Mask::additive_matrix_finite() const {
  // (~keep).float() * -1e24 gives -0.0 at kept positions, as in Python.
  return bool_matrix_.logical_not().to(torch::kFloat) * -1e24;
}

absl::StatusOr<torch::Tensor> Mask::lengths() const {
  if (lengths_.defined()) return lengths_;
  if (bool_matrix_.dim() == 0) return absl::InvalidArgumentError("The mask is not a length mask");
  torch::Tensor len = bool_matrix_.sum(-1);
  torch::Tensor cols = torch::arange(bool_matrix_.size(-1), len.options());
  torch::Tensor rebuilt = cols < len.unsqueeze(-1);
  if (!torch::equal(rebuilt, bool_matrix_)) {
    return absl::InvalidArgumentError("The mask is not a length mask");
  }
  return len;
}

bool Mask::lower_triangular() const {
  if (kind_ == Kind::kTriangularCausal) return true;
  absl::StatusOr<torch::Tensor> len = lengths();
  if (!len.ok() || len->dim() != 1) return false;
  torch::Tensor expected = torch::arange(1, len->size(0) + 1, len->options());
  return torch::equal(*len, expected);
}

Mask Mask::To(torch::Device device) const {
  return Mask(kind_, bool_matrix_.to(device), lengths_.defined() ? lengths_.to(device) : lengths_,
              all_ones_);
}

}  // namespace performer
