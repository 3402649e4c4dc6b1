#include "server/service/open_inference.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/generation/finish_reason.h"
#include "server/logging/user_text.h"
#include "server/tokenizer/tokenizer.h"

namespace performer::server {
namespace {

using inference::InferParameter;
using inference::ModelInferRequest;

constexpr char kTextInput[] = "text_input";
constexpr char kInputIds[] = "input_ids";
constexpr char kSourceText[] = "source_text";
constexpr char kSourceIds[] = "source_ids";
constexpr char kTextOutput[] = "text_output";
constexpr char kOutputIds[] = "output_ids";
constexpr char kBytes[] = "BYTES";
constexpr char kInt32[] = "INT32";
// No tensor here has more elements than a message has bytes; this bound
// only keeps a declared shape's product from overflowing.
constexpr int64_t kMaxElements = int64_t{1} << 31;

absl::Status Invalid(const std::string& what, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

// The number of elements a shape declares.
absl::StatusOr<int64_t> ElementCount(const ModelInferRequest::InferInputTensor& input) {
  int64_t count = 1;
  for (int64_t dim : input.shape()) {
    if (dim < 0 || dim > kMaxElements || count * dim > kMaxElements) {
      return Invalid(absl::StrCat("input ", BoundUserText(input.name())),
                     absl::StrCat("shape [", BoundUserText(absl::StrJoin(input.shape(), ",")),
                                  "] is not a valid tensor shape"));
    }
    count *= dim;
  }
  return count;
}

// Raw contents are little-endian whatever the host.
uint32_t ReadLittleEndian32(const char* bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes);
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void AppendLittleEndian32(uint32_t value, std::string* out) {
  for (int shift = 0; shift < 32; shift += 8) out->push_back(static_cast<char>(value >> shift));
}

// BYTES elements of raw contents: each a 4-byte little-endian length, then
// that many bytes.
absl::StatusOr<std::vector<std::string>> DecodeRawBytes(std::string_view raw,
                                                        const std::string& what) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < raw.size()) {
    if (raw.size() - at < 4) {
      return Invalid(what, "raw BYTES contents end inside an element's 4-byte length");
    }
    const uint32_t length = ReadLittleEndian32(raw.data() + at);
    at += 4;
    if (raw.size() - at < length) {
      return Invalid(what, absl::StrCat("raw BYTES element of ", length, " bytes runs past the ",
                                        raw.size(), " bytes of contents"));
    }
    out.emplace_back(raw.substr(at, length));
    at += length;
  }
  return out;
}

void AppendRawBytes(std::string_view element, std::string* out) {
  AppendLittleEndian32(static_cast<uint32_t>(element.size()), out);
  out->append(element);
}

// One input's elements, from its contents or its raw contents.
absl::StatusOr<std::string> TextElement(const ModelInferRequest::InferInputTensor& input,
                                        const std::string* raw, int64_t count) {
  const std::string what = absl::StrCat("input ", BoundUserText(input.name()));
  if (input.datatype() != kBytes) {
    return Invalid(
        what, absl::StrCat("datatype is ", BoundUserText(input.datatype()), "; it takes BYTES"));
  }
  std::vector<std::string> elements;
  if (raw != nullptr) {
    absl::StatusOr<std::vector<std::string>> decoded = DecodeRawBytes(*raw, what);
    if (!decoded.ok()) return decoded.status();
    elements = std::move(*decoded);
  } else {
    elements.assign(input.contents().bytes_contents().begin(),
                    input.contents().bytes_contents().end());
  }
  if (count != 1 || elements.size() != 1) {
    return Invalid(what, absl::StrCat("holds ", elements.size(), " element(s) in shape [",
                                      BoundUserText(absl::StrJoin(input.shape(), ",")),
                                      "]; it takes one prompt (shape [1]): send one request "
                                      "per prompt"));
  }
  if (SanitizeUtf8(elements[0]) != elements[0]) return Invalid(what, "is not valid UTF-8");
  return std::move(elements[0]);
}

absl::StatusOr<std::vector<int32_t>> IdElements(const ModelInferRequest::InferInputTensor& input,
                                                const std::string* raw, int64_t count) {
  const std::string what = absl::StrCat("input ", BoundUserText(input.name()));
  if (input.datatype() != kInt32) {
    return Invalid(
        what, absl::StrCat("datatype is ", BoundUserText(input.datatype()), "; it takes INT32"));
  }
  std::vector<int32_t> ids;
  if (raw != nullptr) {
    if (raw->size() % 4 != 0) {
      return Invalid(what, absl::StrCat("raw INT32 contents of ", raw->size(),
                                        " bytes are not a whole number of 4-byte elements"));
    }
    ids.resize(raw->size() / 4);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>(ReadLittleEndian32(raw->data() + 4 * i));
    }
  } else {
    ids.assign(input.contents().int_contents().begin(), input.contents().int_contents().end());
  }
  if (static_cast<int64_t>(ids.size()) != count) {
    return Invalid(
        what, absl::StrCat("shape [", BoundUserText(absl::StrJoin(input.shape(), ",")),
                           "] declares ", count, " element(s) but ", ids.size(), " were sent"));
  }
  return ids;
}

const char* KindName(const InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      return "bool_param";
    case InferParameter::kInt64Param:
      return "int64_param";
    case InferParameter::kStringParam:
      return "string_param";
    case InferParameter::kDoubleParam:
      return "double_param";
    case InferParameter::kUint64Param:
      return "uint64_param";
    case InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return "no value";
}

absl::Status WrongKind(const std::string& name, const InferParameter& p, const char* wanted) {
  return Invalid(absl::StrCat("parameter ", BoundUserText(name)),
                 absl::StrCat("takes ", wanted, ", got ", KindName(p)));
}

// An integer parameter within [lo, hi].
absl::StatusOr<int64_t> IntParameter(const std::string& name, const InferParameter& p, int64_t lo,
                                     int64_t hi) {
  int64_t value = 0;
  if (p.parameter_choice_case() == InferParameter::kInt64Param) {
    value = p.int64_param();
  } else if (p.parameter_choice_case() == InferParameter::kUint64Param) {
    if (p.uint64_param() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(absl::StrCat("parameter ", BoundUserText(name)),
                     absl::StrCat(p.uint64_param(), " is out of range [", lo, ", ", hi, "]"));
    }
    value = static_cast<int64_t>(p.uint64_param());
  } else {
    return WrongKind(name, p, "an integer (int64_param or uint64_param)");
  }
  if (value < lo || value > hi) {
    return Invalid(absl::StrCat("parameter ", BoundUserText(name)),
                   absl::StrCat(value, " is out of range [", lo, ", ", hi, "]"));
  }
  return value;
}

absl::StatusOr<double> NumberParameter(const std::string& name, const InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kDoubleParam:
      return p.double_param();
    case InferParameter::kInt64Param:
      return static_cast<double>(p.int64_param());
    case InferParameter::kUint64Param:
      return static_cast<double>(p.uint64_param());
    default:
      return WrongKind(name, p, "a number (double_param, int64_param or uint64_param)");
  }
}

// Sets the GenerateRequest field a request parameter stands for.
absl::Status ApplyParameter(const std::string& name, const InferParameter& p,
                            v1::GenerateRequest* g) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
  if (name == "max_tokens" || name == "top_k" || name == "priority") {
    absl::StatusOr<int64_t> value = IntParameter(name, p, kInt32Min, kInt32Max);
    if (!value.ok()) return value.status();
    const auto v = static_cast<int32_t>(*value);
    if (name == "max_tokens") g->set_max_new_tokens(v);
    if (name == "top_k") g->set_top_k(v);
    if (name == "priority") g->set_priority(v);
    return absl::OkStatus();
  }
  if (name == "temperature" || name == "top_p" || name == "repetition_penalty") {
    absl::StatusOr<double> value = NumberParameter(name, p);
    if (!value.ok()) return value.status();
    const auto v = static_cast<float>(*value);
    if (name == "temperature") g->set_temperature(v);
    if (name == "top_p") g->set_top_p(v);
    if (name == "repetition_penalty") g->set_repetition_penalty(v);
    return absl::OkStatus();
  }
  if (name == "seed") {
    if (p.parameter_choice_case() == InferParameter::kUint64Param) {
      g->set_seed(p.uint64_param());
      return absl::OkStatus();
    }
    absl::StatusOr<int64_t> value = IntParameter(name, p, 0, std::numeric_limits<int64_t>::max());
    if (!value.ok()) return value.status();
    g->set_seed(static_cast<uint64_t>(*value));
    return absl::OkStatus();
  }
  if (name == "stop") {
    if (p.parameter_choice_case() != InferParameter::kStringParam) {
      return WrongKind(name, p, "a string (string_param)");
    }
    g->add_stop_strings(p.string_param());
    return absl::OkStatus();
  }
  if (name == "session_id") {
    if (p.parameter_choice_case() != InferParameter::kStringParam) {
      return WrongKind(name, p, "a string (string_param)");
    }
    g->set_session_id(p.string_param());
    return absl::OkStatus();
  }
  if (name == "ignore_eos" || name == "create_session" ||
      name == "triton_enable_empty_final_response") {
    if (p.parameter_choice_case() != InferParameter::kBoolParam) {
      return WrongKind(name, p, "a bool (bool_param)");
    }
    if (name == "ignore_eos") g->set_ignore_eos(p.bool_param());
    if (name == "create_session") g->set_create_session(p.bool_param());
    // Triton's streaming clients send triton_enable_empty_final_response;
    // the final response (which carries the finish reason) is sent
    // whatever its value.
    return absl::OkStatus();
  }
  return Invalid(absl::StrCat("parameter ", BoundUserText(name)),
                 absl::StrCat("unknown; the parameters are ", kInferParameters));
}

absl::Status ApplyInputs(const ModelInferRequest& request, const HostedModel& model,
                         v1::GenerateRequest* g) {
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    return Invalid("raw_input_contents",
                   absl::StrCat("has ", request.raw_input_contents_size(), " entries for ",
                                request.inputs_size(), " inputs; it needs one per input"));
  }
  std::set<std::string> seen;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const ModelInferRequest::InferInputTensor& input = request.inputs(i);
    const std::string what = absl::StrCat("input ", BoundUserText(input.name()));
    if (!seen.insert(input.name()).second) return Invalid(what, "sent twice");
    if (raw && input.has_contents() && input.contents().ByteSizeLong() > 0) {
      return Invalid(what, "has contents although the request uses raw_input_contents");
    }
    const bool source = input.name() == kSourceText || input.name() == kSourceIds;
    if (source && model.kind != ModelKind::kEncoderDecoder) {
      return Invalid(what, absl::StrCat("model ", model.name,
                                        " is decoder-only; it takes no source (send "
                                        "text_input or input_ids)"));
    }
    absl::StatusOr<int64_t> count = ElementCount(input);
    if (!count.ok()) return count.status();
    const std::string* contents = raw ? &request.raw_input_contents(i) : nullptr;
    if (input.name() == kTextInput || input.name() == kSourceText) {
      absl::StatusOr<std::string> text = TextElement(input, contents, *count);
      if (!text.ok()) return text.status();
      if (source) {
        g->set_source_text(std::move(*text));
      } else {
        g->set_prompt_text(std::move(*text));
      }
    } else if (input.name() == kInputIds || input.name() == kSourceIds) {
      absl::StatusOr<std::vector<int32_t>> ids = IdElements(input, contents, *count);
      if (!ids.ok()) return ids.status();
      v1::TokenIds* target = source ? g->mutable_source_tokens() : g->mutable_prompt_tokens();
      target->mutable_ids()->Add(ids->begin(), ids->end());
    } else {
      return Invalid(what, absl::StrCat("unknown; model ", model.name, " takes ",
                                        model.kind == ModelKind::kEncoderDecoder
                                            ? "text_input or input_ids, and source_text or "
                                              "source_ids"
                                            : "text_input or input_ids"));
    }
  }
  if (seen.count(kTextInput) && seen.count(kInputIds)) {
    return Invalid("inputs", "text_input and input_ids both sent; send the prompt once");
  }
  if (seen.count(kSourceText) && seen.count(kSourceIds)) {
    return Invalid("inputs", "source_text and source_ids both sent; send the source once");
  }
  if (model.kind != ModelKind::kEncoderDecoder && !seen.count(kTextInput) &&
      !seen.count(kInputIds)) {
    return Invalid("inputs", "no prompt; send text_input (BYTES) or input_ids (INT32)");
  }
  return absl::OkStatus();
}

absl::Status ApplyOutputs(const ModelInferRequest& request, const HostedModel& model,
                          InferReply* reply) {
  const bool has_text = model.tokenizer != nullptr;
  if (request.outputs_size() == 0) {
    reply->text_output = has_text;
    reply->output_ids = true;
    return absl::OkStatus();
  }
  for (const auto& output : request.outputs()) {
    const std::string what = absl::StrCat("output ", BoundUserText(output.name()));
    bool* wanted = nullptr;
    if (output.name() == kTextOutput && has_text) {
      wanted = &reply->text_output;
    } else if (output.name() == kOutputIds) {
      wanted = &reply->output_ids;
    } else {
      return Invalid(what, absl::StrCat("unknown; model ", model.name, " has the outputs ",
                                        has_text ? "text_output and output_ids" : "output_ids"));
    }
    if (*wanted) return Invalid(what, "requested twice");
    *wanted = true;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModelVersion(const HostedModel& model, const std::string& version) {
  if (version.empty() || version == kInferModelVersion) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("model ", model.name, " has no version \"",
                                          BoundUserText(version), "\" (its only version is ",
                                          kInferModelVersion, ")"));
}

std::string EchoedInferId(const std::string& id, const RequestBounds& bounds) {
  return static_cast<int64_t>(id.size()) <= bounds.max_request_id_bytes ? id : std::string();
}

absl::StatusOr<InferCall> ToGenerateRequest(const ModelInferRequest& request,
                                            const HostedModel& model) {
  InferCall call;
  call.reply.id = request.id();
  call.reply.model_name = model.name;
  call.reply.raw = request.raw_input_contents_size() > 0;
  v1::GenerateRequest& g = call.generate;
  // The id is only echoed: clients of this protocol need not make it unique,
  // so the engine's request id is the server's own.
  g.set_model(model.name);
  if (absl::Status s = ApplyInputs(request, model, &g); !s.ok()) return s;
  for (const auto& [name, value] : request.parameters()) {
    if (absl::Status s = ApplyParameter(name, value, &g); !s.ok()) return s;
  }
  if (absl::Status s = ApplyOutputs(request, model, &call.reply); !s.ok()) return s;
  return call;
}

void FillInferResponse(const InferReply& reply, const v1::GenerateResponse& generated,
                       const StreamSummary* summary, inference::ModelInferResponse* response) {
  response->set_model_name(reply.model_name);
  response->set_model_version(kInferModelVersion);
  response->set_id(reply.id);
  if (reply.text_output) {
    auto* out = response->add_outputs();
    out->set_name(kTextOutput);
    out->set_datatype(kBytes);
    out->add_shape(1);
    if (reply.raw) {
      AppendRawBytes(generated.text(), response->add_raw_output_contents());
    } else {
      out->mutable_contents()->add_bytes_contents(generated.text());
    }
  }
  if (reply.output_ids) {
    auto* out = response->add_outputs();
    out->set_name(kOutputIds);
    out->set_datatype(kInt32);
    out->add_shape(generated.token_ids_size());
    if (reply.raw) {
      std::string* raw = response->add_raw_output_contents();
      raw->reserve(size_t{4} * static_cast<size_t>(generated.token_ids_size()));
      for (int32_t id : generated.token_ids()) AppendLittleEndian32(static_cast<uint32_t>(id), raw);
    } else {
      out->mutable_contents()->mutable_int_contents()->CopyFrom(generated.token_ids());
    }
  }
  if (summary != nullptr) {
    auto& parameters = *response->mutable_parameters();
    parameters["finish_reason"].set_string_param(
        std::string(generation::FinishReasonName(summary->reason)));
    parameters["prompt_tokens"].set_int64_param(summary->prompt_tokens);
    parameters["generated_tokens"].set_int64_param(summary->generated_tokens);
    if (summary->session_position > 0) {
      parameters["session_position"].set_int64_param(summary->session_position);
    }
  }
}

void FillModelMetadata(const HostedModel& model, inference::ModelMetadataResponse* metadata) {
  metadata->set_name(model.name);
  metadata->add_versions(kInferModelVersion);
  metadata->set_platform("performer");
  auto add = [](auto* tensors, const char* name, const char* datatype, int64_t dim) {
    auto* t = tensors->Add();
    t->set_name(name);
    t->set_datatype(datatype);
    t->add_shape(dim);
  };
  const bool has_text = model.tokenizer != nullptr;
  if (has_text) add(metadata->mutable_inputs(), kTextInput, kBytes, 1);
  add(metadata->mutable_inputs(), kInputIds, kInt32, -1);
  if (model.kind == ModelKind::kEncoderDecoder) {
    if (has_text) add(metadata->mutable_inputs(), kSourceText, kBytes, 1);
    add(metadata->mutable_inputs(), kSourceIds, kInt32, -1);
  }
  if (has_text) add(metadata->mutable_outputs(), kTextOutput, kBytes, 1);
  add(metadata->mutable_outputs(), kOutputIds, kInt32, -1);
}

absl::Status InProtocolTerms(const absl::Status& status) {
  // performer.v1 field -> where the value came from in this protocol (the
  // parameters of the same name need no translation).
  static constexpr std::pair<const char*, const char*> kFields[] = {
      {"max_new_tokens", "parameter max_tokens"}, {"prompt_text", "input text_input"},
      {"prompt_tokens", "input input_ids"},       {"source_text", "input source_text"},
      {"source_tokens", "input source_ids"},      {"stop_strings", "parameter stop"},
  };
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  for (const auto& [field, ours] : kFields) {
    if (absl::StartsWith(status.message(), field)) {
      return absl::Status(status.code(), absl::StrCat(ours, ": ", status.message()));
    }
  }
  return status;
}

}  // namespace performer::server
