#include "core/decoding/performer_decoder.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "core/attention/linear_weights.h"
#include "core/attention/row_invariance.h"
#include "core/decoding/token_ids.h"
#include "core/models/model_weights.h"

namespace performer::decoding {
absl::StatusOr<std::unique_ptr<PerformerDecoder>> PerformerDecoder::Create(
    models::LoadedModel model, int64_t capacity, const PerformerDecoderOptions& options) {
  if (capacity < 1) return absl::InvalidArgumentError("decoder capacity must be at least 1");
  DecoderInfo info;
  info.model_class = std::string(models::ModelClassName(model.model_class));
  info.capacity = capacity;
  models::PerformerLM decoder{nullptr};
  switch (model.model_class) {
    case models::ModelClass::kPerformerLM:
      if (!model.lm->config().causal) {
        return absl::FailedPreconditionError(
            "model is bidirectional (causal=false): incremental decoding needs a causal "
            "PerformerLM");
      }
      decoder = model.lm;
      break;
    case models::ModelClass::kPerformerEncDec: {
      decoder = model.encdec->decoder();
      const models::PerformerLMConfig& enc = model.encdec->config().enc;
      info.needs_source = true;
      info.source_vocab_size = enc.num_tokens;
      info.max_source_len = enc.position_limit();
      break;
    }
    case models::ModelClass::kFastTransformersLM:
    case models::ModelClass::kFastAttention:
      return absl::FailedPreconditionError(
          absl::StrCat("model_class ", info.model_class, " cannot decode with PerformerDecoder"));
  }
  torch::nn::Module& root = *model.module();
  // The whole model, an encoder-decoder's encoder too, runs in the dtype.
  ConvertLinearWeights({&root}, models::WeightScalarType(options.step.weight_dtype));
  // Outside InferenceMode: the model's full forward (prefill, or a caller's
  // own forward with autograd) also reads the prepared rotary tables.
  decoder->PrepareForDecoding(options.step);
  info.weight_dtype = models::WeightDtypeName(options.step.weight_dtype);
  std::vector<torch::Tensor> weights = models::ParametersAndBuffers(root);
  decoder->AppendDecodeTensors(&weights);
  info.weight_bytes = models::DistinctStorageBytes(weights);
  c10::InferenceMode guard;
  info.vocab_size = decoder->config().num_tokens;
  info.max_seq_len = decoder->config().position_limit();
  StatePool pool = decoder->AllocateState(capacity);
  return std::unique_ptr<PerformerDecoder>(
      new PerformerDecoder(info, std::move(model), decoder, std::move(pool), options));
}

int64_t PerformerDecoder::StateBytesPerSequence(const models::LoadedModel& model) {
  models::PerformerEncDec encdec = model.encdec;
  models::PerformerLM lm =
      model.model_class == models::ModelClass::kPerformerEncDec ? encdec->decoder() : model.lm;
  c10::InferenceMode guard;
  return lm->AllocateState(1).BytesPerSequence();
}

PerformerDecoder::PerformerDecoder(const DecoderInfo& info, models::LoadedModel model,
                                   models::PerformerLM decoder, StatePool pool,
                                   const PerformerDecoderOptions& options)
    : SlotPoolDecoder(info, decoder->parameters().front().device(), std::move(pool)),
      model_(std::move(model)),
      decoder_(std::move(decoder)) {
  if (options.cuda_graphs && device().is_cuda()) {
    c10::InferenceMode guard;
    absl::StatusOr<std::unique_ptr<CudaStepGraphs>> graphs =
        CudaStepGraphs::Capture(decoder_, SlotPoolDecoder::pool());
    if (graphs.ok()) {
      step_graphs_ = *std::move(graphs);
    } else {
      step_graphs_status_ = graphs.status();
    }
    mutable_info().cuda_graphs = step_graphs_ != nullptr;
  }
}

absl::Status PerformerDecoder::CheckSource(const PrefillRequest& r) const {
  if (!info().needs_source) return SlotPoolDecoder::CheckSource(r);
  if (r.source.empty()) {
    return absl::InvalidArgumentError("an encoder-decoder model needs a non-empty source");
  }
  if (static_cast<int64_t>(r.source.size()) > info().max_source_len) {
    return absl::OutOfRangeError(absl::StrCat("source has ", r.source.size(),
                                              " tokens; the encoder's max_seq_len is ",
                                              info().max_source_len));
  }
  if (!r.source_mask.empty() && r.source_mask.size() != r.source.size()) {
    return absl::InvalidArgumentError(absl::StrCat("source_mask has ", r.source_mask.size(),
                                                   " entries for ", r.source.size(),
                                                   " source tokens"));
  }
  return CheckTokenIds(r.source, info().source_vocab_size, "source");
}

torch::Tensor PerformerDecoder::PrefillSlot(int64_t slot, const PrefillRequest& r) {
  pool().ResetRows(slot, 1);
  const std::vector<SlotRows> rows = pool().Rows(slot, 1, static_cast<int64_t>(r.prompt.size()));
  models::LMForwardOptions options;
  options.capture = &rows;
  if (info().needs_source) {
    torch::Tensor source = OnDevice(r.source).unsqueeze(0);
    torch::Tensor mask;
    if (!r.source_mask.empty()) {
      std::vector<int64_t> m(r.source_mask.begin(), r.source_mask.end());
      mask = OnDevice(m).to(torch::kBool).unsqueeze(0);
    }
    torch::Tensor encodings = model_.encdec->Encode(source, mask);
    decoder_->InitCross(encodings, mask, rows);
    options.context = encodings;
    options.context_mask = mask;
  }
  if (RowInvariantOn(device())) {
    // The prompt as a chunk from the empty state: the tokens get the bits
    // that steps, or any other split into chunks, give them
    // (core/attention/row_invariance.h).
    return decoder_->Extend(OnDevice(r.prompt), rows, 0);
  }
  torch::Tensor logits = decoder_->forward(OnDevice(r.prompt).unsqueeze(0), options);
  return logits[0][logits.size(1) - 1];
}

torch::Tensor PerformerDecoder::PrefillSlots(int64_t first,
                                             const std::vector<const PrefillRequest*>& requests) {
  const auto count = static_cast<int64_t>(requests.size());
  if (info().needs_source || count == 1 || RowInvariantOn(device())) {
    return SlotPoolDecoder::PrefillSlots(first, requests);
  }
  const auto length = static_cast<int64_t>(requests.front()->prompt.size());
  std::vector<int64_t> tokens;
  tokens.reserve(static_cast<size_t>(count * length));
  for (const PrefillRequest* r : requests) {
    tokens.insert(tokens.end(), r->prompt.begin(), r->prompt.end());
  }
  pool().ResetRows(first, count);
  const std::vector<SlotRows> rows = pool().Rows(first, count, length);
  models::LMForwardOptions options;
  options.capture = &rows;
  torch::Tensor logits = decoder_->forward(OnDevice(tokens).view({count, length}), options);
  return logits.select(1, length - 1);
}

torch::Tensor PerformerDecoder::ExtendSlot(int64_t slot, int64_t position,
                                           const torch::Tensor& tokens) {
  return decoder_->Extend(tokens, pool().Rows(slot, 1, position + tokens.size(0)), position);
}

torch::Tensor PerformerDecoder::StepSlots(const SlotTable::StepPlan& plan,
                                          const torch::Tensor& tokens) {
  const int64_t count = static_cast<int64_t>(plan.slots.size());
  if (step_graphs_ != nullptr && plan.contiguous && plan.slots.front() == 0 && count == active() &&
      count <= step_graphs_->max_rows()) {
    // Every live sequence steps: rows [0, count), the rest of the bucket free.
    return step_graphs_->Replay(tokens, count);
  }
  if (plan.contiguous) {
    return decoder_->Step(tokens, pool().Rows(plan.slots.front(), count, plan.live_length));
  }
  torch::Tensor index = OnDevice(plan.slots);
  const std::vector<SlotRows> rows = pool().Gather(index, plan.live_length);
  torch::Tensor logits = decoder_->Step(tokens, rows);
  pool().Scatter(index, rows);
  return logits;
}

}  // namespace performer::decoding
