// ValidateGenerationRequest on requests and limits built from arbitrary
// bytes (every field, including NaN and infinite floats, huge and negative
// ids and lengths, any bounds): it returns a status and never crashes; an
// accepted request satisfies the invariants the engine relies on and the
// bounds (request id, stop strings, max_new_tokens).
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdlib>

#include "server/engine/generation_request.h"

namespace {

int64_t Integer(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegralInRange<int64_t>(-2, 300);
    case 1:
      return in.ConsumeIntegral<int64_t>();
    default:
      return in.ConsumeIntegralInRange<int64_t>(0, 70000);
  }
}

float Float(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      return NAN;
    case 1:
      return in.ConsumeBool() ? INFINITY : -INFINITY;
    case 2:
      return in.ConsumeFloatingPoint<float>();
    default:
      return in.ConsumeFloatingPointInRange<float>(-2.0f, 2.0f);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  performer::server::RequestLimits limits;
  limits.vocab_size = Integer(in);
  limits.max_seq_len = Integer(in);
  limits.needs_source = in.ConsumeBool();
  limits.source_vocab_size = Integer(in);
  limits.max_source_len = Integer(in);
  limits.has_tokenizer = in.ConsumeBool();
  performer::server::RequestBounds& bounds = limits.bounds;
  bounds.max_new_tokens = Integer(in);
  bounds.max_request_id_bytes = in.ConsumeIntegralInRange<int64_t>(-1, 80);
  bounds.max_stop_strings = in.ConsumeIntegralInRange<int64_t>(-1, 10);
  bounds.max_stop_string_bytes = in.ConsumeIntegralInRange<int64_t>(-1, 40);

  performer::server::GenerationRequest r;
  r.request_id = in.ConsumeRandomLengthString(64);
  r.session_id = in.ConsumeRandomLengthString(200);
  const size_t prompt = in.ConsumeIntegralInRange<size_t>(0, 64);
  for (size_t i = 0; i < prompt; ++i) r.prompt.push_back(Integer(in));
  const size_t source = in.ConsumeIntegralInRange<size_t>(0, 16);
  for (size_t i = 0; i < source; ++i) r.source.push_back(Integer(in));
  performer::generation::SamplingParams& p = r.sampling;
  p.temperature = Float(in);
  p.top_k = Integer(in);
  if (in.ConsumeBool()) p.filter_thres = in.ConsumeFloatingPoint<double>();
  p.top_p = Float(in);
  p.repetition_penalty = Float(in);
  p.max_new_tokens = Integer(in);
  const size_t stops = in.ConsumeIntegralInRange<size_t>(0, 8);
  for (size_t i = 0; i < stops; ++i) p.stop_token_ids.push_back(Integer(in));
  if (in.ConsumeBool()) p.eos_token_id = Integer(in);
  const size_t strings = in.ConsumeIntegralInRange<size_t>(0, 8);
  for (size_t i = 0; i < strings; ++i) p.stop_strings.push_back(in.ConsumeRandomLengthString(32));
  r.priority = in.ConsumeIntegral<int32_t>();

  if (!performer::server::ValidateGenerationRequest(r, limits).ok()) return 0;
  if (r.prompt.empty() && r.session_id.empty()) std::abort();
  for (int64_t id : r.prompt) {
    if (id < 0 || id >= limits.vocab_size) std::abort();
  }
  if (!std::isfinite(p.temperature) || p.temperature < 0 || p.max_new_tokens < 1 ||
      p.max_new_tokens > bounds.max_new_tokens) {
    std::abort();
  }
  if (static_cast<int64_t>(r.request_id.size()) > bounds.max_request_id_bytes ||
      static_cast<int64_t>(p.stop_strings.size()) > bounds.max_stop_strings) {
    std::abort();
  }
  for (const std::string& stop : p.stop_strings) {
    if (static_cast<int64_t>(stop.size()) > bounds.max_stop_string_bytes) std::abort();
  }
  if (r.session_id.empty() &&
      static_cast<int64_t>(r.prompt.size()) + p.max_new_tokens > limits.max_seq_len) {
    std::abort();
  }
  return 0;
}
