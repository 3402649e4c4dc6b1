// The two rotary position layouts of performer-pytorch
// (docs/reference/performer-pytorch.md §5.3, §6.2).
//
// Global heads: interleaved pairs (2i, 2i+1) rotated by the angles of a
// stored sinusoidal table row [sin(p f_0..), cos(p f_0..)] (all sines, then all
// cosines):  out[2i] = t[2i] c_i - t[2i+1] s_i,  out[2i+1] = t[2i+1] c_i + t[2i] s_i.
// Local heads (local-attention 1.11.x): halves (i, i + d/2) rotated by
// angle slot * inv_freq[i]:  out = t cos + [-t_hi, t_lo] sin.
#pragma once

#include <torch/types.h>

namespace performer {

// The sines and cosines of table rows, each repeated per pair [..., d]:
// what ApplyInterleavedRotary computes on every call, precomputed once for
// the decode step.
// signed_sin is sin with the even entries negated, so that the rotation is
// t * cos + swap_pairs(t) * signed_sin (three elementwise passes).
struct InterleavedRotary {
  torch::Tensor sin;
  torch::Tensor cos;
  torch::Tensor signed_sin;
  bool defined() const { return sin.defined(); }
  InterleavedRotary Rows(const torch::Tensor& positions) const {
    return {sin.index_select(0, positions), cos.index_select(0, positions),
            signed_sin.index_select(0, positions)};
  }
  InterleavedRotary First(int64_t n) const {
    return {sin.narrow(0, 0, n), cos.narrow(0, 0, n), signed_sin.narrow(0, 0, n)};
  }
  InterleavedRotary Unsqueeze(int64_t dim) const {
    return {sin.unsqueeze(dim), cos.unsqueeze(dim), signed_sin.unsqueeze(dim)};
  }
};
InterleavedRotary MakeInterleavedRotary(const torch::Tensor& table);
// t [..., d]; the rows' tensors [..., d] broadcastable against t.
torch::Tensor ApplyInterleavedRotary(const torch::Tensor& t, const InterleavedRotary& rows);

// Angles for slots: slots [...] (any integer or float tensor) x inv_freq [d/2]
// -> [..., d] (the d/2 angles twice, as local-attention concatenates them).
torch::Tensor HalfRotaryAngles(const torch::Tensor& slots, const torch::Tensor& inv_freq);

// t [..., d]; angles [..., d] broadcastable against t.
torch::Tensor ApplyHalfRotary(const torch::Tensor& t, const torch::Tensor& angles);

}  // namespace performer
