#include "core/models/performer_encdec.h"

namespace performer::models {

PerformerEncDecImpl::PerformerEncDecImpl(const PerformerEncDecConfig& config) : config_(config) {
  enc_ = register_module("enc", PerformerLM(config.enc));
  auto wrapper = register_module("dec", std::make_shared<torch::nn::Module>());
  dec_ = wrapper->register_module("net", PerformerLM(config.dec));
  if (config.tie_token_embeds) dec_->TieTokenEmbedding(enc_->token_emb());
}

torch::Tensor PerformerEncDecImpl::Encode(const torch::Tensor& tokens, const torch::Tensor& mask) {
  LMForwardOptions o;
  o.mask = mask;
  o.return_encodings = true;
  return enc_(tokens, o);
}

torch::Tensor PerformerEncDecImpl::DecoderLogits(const torch::Tensor& tokens,
                                                 const torch::Tensor& encodings,
                                                 const torch::Tensor& context_mask,
                                                 const torch::Tensor& mask) {
  LMForwardOptions o;
  o.mask = mask;
  o.context = encodings;
  o.context_mask = context_mask;
  return dec_(tokens, o);
}

torch::Tensor PerformerEncDecImpl::Loss(const torch::Tensor& seq_in, const torch::Tensor& seq_out,
                                        const torch::Tensor& enc_mask) {
  torch::Tensor encodings = Encode(seq_in, enc_mask);
  const int64_t n = seq_out.size(1);
  torch::Tensor logits = DecoderLogits(seq_out.narrow(1, 0, n - 1), encodings, enc_mask);
  return torch::nn::functional::cross_entropy(
      logits.transpose(1, 2), seq_out.narrow(1, 1, n - 1),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(config_.ignore_index));
}

}  // namespace performer::models
