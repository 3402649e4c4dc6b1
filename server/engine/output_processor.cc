#include "server/engine/output_processor.h"

#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/generation/stop_rules.h"
#include "server/tokenizer/tokenizer.h"

namespace performer::server {
namespace {

void DeleteOutput(SequenceOutput* output) { delete output; }

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// Each tensor as rows [n, vocab] (a prefill's logits are one row [vocab]).
std::vector<torch::Tensor> Flat(const std::vector<torch::Tensor>& rows) {
  std::vector<torch::Tensor> out;
  out.reserve(rows.size());
  for (const torch::Tensor& r : rows) out.push_back(r.reshape({-1, r.size(-1)}));
  return out;
}

}  // namespace

OutputProcessor::OutputProcessor(const Tokenizer* tokenizer, int64_t max_seq_len,
                                 EngineObserver* observer, int64_t stream_messages_per_step)
    : tokenizer_(tokenizer),
      max_seq_len_(max_seq_len),
      observer_(observer),
      stream_messages_per_step_(stream_messages_per_step) {}

void OutputProcessor::Attach(ScheduledSequence& s) const {
  auto output = std::make_unique<SequenceOutput>(s.request.sampling);
  if (tokenizer_ != nullptr) {
    output->text = std::make_unique<TextOutput>(*tokenizer_, s.request.sampling.stop_strings);
  }
  // Everything the model has seen before the first new token: a session's
  // history, then the prompt (for the repetition penalty and the length
  // limit).
  output->context = s.history;
  output->context.insert(output->context.end(), s.request.prompt.begin(), s.request.prompt.end());
  s.output = {output.release(), &DeleteOutput};
}

int64_t OutputProcessor::Emit(const std::vector<ScheduledSequence*>& sequences,
                              const std::vector<torch::Tensor>& rows) {
  if (sequences.empty()) return 0;
  const torch::Tensor logits =
      rows.size() == 1 ? rows[0].reshape({-1, rows[0].size(-1)}) : torch::cat(Flat(rows), 0);
  TORCH_CHECK(logits.size(0) == static_cast<int64_t>(sequences.size()),
              "OutputProcessor::Emit: ", sequences.size(), " sequences but ", logits.size(0),
              " rows of logits");
  std::vector<generation::TokenSampler*> samplers;
  std::vector<const std::vector<int64_t>*> contexts;
  std::vector<int64_t> logprob_rows;
  samplers.reserve(sequences.size());
  contexts.reserve(sequences.size());
  for (size_t i = 0; i < sequences.size(); ++i) {
    SequenceOutput& out = *sequences[i]->output;
    samplers.push_back(&out.sampler);
    // The context is only read by the repetition penalty.
    contexts.push_back(out.sampler.params().repetition_penalty > 1.0f ? &out.context : nullptr);
    if (sequences[i]->request.return_logprobs) logprob_rows.push_back(static_cast<int64_t>(i));
  }
  const std::vector<int64_t> tokens = generation::SampleBatch(logits, samplers, contexts);
  // Log-probabilities of the drawn tokens under the model's distribution,
  // for the rows that asked, in one batched op.
  std::vector<float> logprobs;
  if (!logprob_rows.empty()) {
    const torch::Tensor rows = torch::tensor(logprob_rows, torch::kLong).to(logits.device());
    std::vector<int64_t> picked;
    picked.reserve(logprob_rows.size());
    for (int64_t r : logprob_rows) picked.push_back(tokens[static_cast<size_t>(r)]);
    const torch::Tensor ids = torch::tensor(picked, torch::kLong).to(logits.device());
    const torch::Tensor values =
        torch::log_softmax(logits.index_select(0, rows).to(torch::kDouble), 1)
            .gather(1, ids.unsqueeze(1))
            .squeeze(1)
            .to(torch::kCPU, torch::kFloat)
            .contiguous();
    logprobs.assign(values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
  }
  const absl::Time now = absl::Now();
  const auto n = static_cast<int64_t>(sequences.size());
  const int64_t load_tokens_per_message =
      stream_messages_per_step_ > 0
          ? std::max<int64_t>(1, (n + stream_messages_per_step_ - 1) / stream_messages_per_step_)
          : 1;
  size_t next_logprob = 0;
  int64_t emitted = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const float* logprob = nullptr;
    if (sequences[i]->request.return_logprobs) logprob = &logprobs[next_logprob++];
    if (EmitOne(*sequences[i], tokens[i], logprob, now, load_tokens_per_message)) ++emitted;
  }
  return emitted;
}

bool OutputProcessor::EmitOne(ScheduledSequence& s, int64_t token, const float* logprob,
                              absl::Time now, int64_t load_tokens_per_message) {
  SequenceOutput& out = *s.output;
  if (s.generated == 0) {
    s.first_token = now;
  } else if (observer_ != nullptr) {
    observer_->OnInterTokenGap(Seconds(now - s.last_token_time));
  }
  s.last_token_time = now;
  out.context.push_back(token);
  ++s.generated;
  StreamChunk chunk;
  chunk.token_ids.push_back(static_cast<int32_t>(token));
  if (logprob != nullptr) chunk.logprobs.push_back(*logprob);
  if (!s.request.session_id.empty()) {
    chunk.session_position = static_cast<int64_t>(out.context.size());
  }
  // The new token would be fed at position context.size() - 1.
  FinishReason reason =
      generation::CheckStop(s.request.sampling, out.stop_tokens, token, s.generated,
                            static_cast<int64_t>(out.context.size()) - 1, max_seq_len_);
  if (out.text != nullptr) {
    bool stopped = false;
    chunk.text = out.text->Push(static_cast<int32_t>(token), &stopped);
    if (stopped) {
      reason = FinishReason::kStopString;
    } else if (reason != FinishReason::kNone) {
      chunk.text += out.text->Flush();
    }
  }
  if (!s.stream->Append(chunk, load_tokens_per_message)) {
    s.End(FinishReason::kError,
          absl::ResourceExhaustedError(absl::StrCat("the client read too slowly: more than ",
                                                    s.request.max_buffered_tokens,
                                                    " generated tokens were waiting to be sent")));
    return false;
  }
  if (reason != FinishReason::kNone) {
    s.End(reason);
  } else {
    s.last_token = token;
  }
  return true;
}

void OutputProcessor::Finish(ScheduledSequence& s) const {
  const absl::Time end = absl::Now();
  StreamSummary summary;
  summary.reason = s.finish;
  summary.status = s.status;
  summary.prompt_tokens =
      static_cast<int64_t>(s.history.size() + s.request.prompt.size() + s.request.source.size());
  summary.cached_prompt_tokens = static_cast<int64_t>(s.cached_prompt_tokens);
  if (!s.request.session_id.empty()) {
    summary.session_position =
        s.output != nullptr ? static_cast<int64_t>(s.output->context.size())
                            : static_cast<int64_t>(s.history.size() + s.request.prompt.size());
  }
  summary.generated_tokens = s.generated;
  const bool admitted = s.admitted != absl::InfinitePast();
  summary.queue_seconds = Seconds((admitted ? s.admitted : end) - s.accepted);
  summary.time_to_first_token_seconds =
      s.first_token == absl::InfinitePast() ? 0.0 : Seconds(s.first_token - s.accepted);
  summary.total_seconds = Seconds(end - s.accepted);
  if (observer_ != nullptr) observer_->OnFinished(summary, admitted ? s.prefill_seconds : -1.0);
  s.stream->Finish(std::move(summary));
}

}  // namespace performer::server
