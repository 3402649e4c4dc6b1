// performer-pytorch's PerformerEncDec (docs/reference/performer-pytorch.md
// §1.5, §8): an encoder PerformerLM (its encodings = final LayerNorm output;
// its to_out is unused) and a causal decoder PerformerLM with cross attention,
// under "enc." and "dec.net." (the AutoregressiveWrapper's attribute).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "core/models/performer_config.h"
#include "core/models/performer_lm.h"

namespace performer::models {

class PerformerEncDecImpl : public torch::nn::Module {
 public:
  explicit PerformerEncDecImpl(const PerformerEncDecConfig& config);

  // enc(tokens, mask=mask, return_encodings=True) -> [b, n, dim].
  torch::Tensor Encode(const torch::Tensor& tokens, const torch::Tensor& mask = {});
  // dec.net(tokens, context=encodings, context_mask=context_mask[, mask]) -> logits.
  torch::Tensor DecoderLogits(const torch::Tensor& tokens, const torch::Tensor& encodings,
                              const torch::Tensor& context_mask = {},
                              const torch::Tensor& mask = {});
  // model(seq_in, seq_out, enc_mask): mean cross entropy of the decoder on
  // seq_out[:, :-1] against seq_out[:, 1:], ignoring ignore_index.
  torch::Tensor Loss(const torch::Tensor& seq_in, const torch::Tensor& seq_out,
                     const torch::Tensor& enc_mask = {});

  PerformerLM& encoder() { return enc_; }
  PerformerLM& decoder() { return dec_; }
  const PerformerEncDecConfig& config() const { return config_; }

 private:
  PerformerEncDecConfig config_;
  PerformerLM enc_{nullptr};
  PerformerLM dec_{nullptr};
};
TORCH_MODULE(PerformerEncDec);

}  // namespace performer::models
