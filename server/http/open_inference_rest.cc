#include "server/http/open_inference_rest.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/io/bounded_file.h"
#include "server/http/http_generation.h"
#include "server/http/openai_response.h"
#include "server/logging/user_text.h"
#include "server/service/generation_rpc.h"
#include "server/service/open_inference.h"

namespace performer::server {
namespace {

using inference::InferParameter;
using inference::ModelInferRequest;
using inference::ModelInferResponse;
using nlohmann::json;

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

std::string OipError(const absl::Status& status) {
  return json({{"error", std::string(status.message())}})
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status ReadParameter(const std::string& field, const json& v, InferParameter& out) {
  if (v.is_boolean()) {
    out.set_bool_param(v.get<bool>());
  } else if (v.is_number_unsigned()) {
    out.set_uint64_param(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    out.set_int64_param(v.get<int64_t>());
  } else if (v.is_number_float()) {
    out.set_double_param(v.get<double>());
  } else if (v.is_string()) {
    out.set_string_param(v.get<std::string>());
  } else {
    return Bad(field, "a parameter is a string, a number or a bool");
  }
  return absl::OkStatus();
}

absl::Status ReadParameters(const std::string& field, const json& v,
                            google::protobuf::Map<std::string, InferParameter>& out) {
  if (!v.is_object()) return Bad(field, "must be an object");
  for (auto item = v.begin(); item != v.end(); ++item) {
    if (absl::Status s = ReadParameter(absl::StrCat(field, ".", BoundUserText(item.key())),
                                       item.value(), out[item.key()]);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// `data` (flat, or nested as the shape) into the tensor's contents.
absl::Status ReadData(const std::string& field, const std::string& datatype, const json& data,
                      inference::InferTensorContents& contents) {
  std::vector<const json*> flat;
  std::vector<const json*> pending = {&data};
  while (!pending.empty()) {
    const json* v = pending.back();
    pending.pop_back();
    if (v->is_array()) {
      for (auto it = v->rbegin(); it != v->rend(); ++it) pending.push_back(&*it);
    } else {
      flat.push_back(v);
    }
  }
  for (const json* v : flat) {
    if (datatype == "BYTES" && v->is_string()) {
      contents.add_bytes_contents(v->get<std::string>());
    } else if (datatype == "INT32" && v->is_number_integer() &&
               v->get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
               v->get<int64_t>() <= std::numeric_limits<int32_t>::max()) {
      contents.add_int_contents(static_cast<int32_t>(v->get<int64_t>()));
    } else if (datatype == "INT64" && v->is_number_integer()) {
      contents.add_int64_contents(v->get<int64_t>());
    } else {
      return Bad(field, absl::StrCat("data must be ", datatype == "BYTES" ? "strings" : "integers",
                                     " for datatype ", BoundUserText(datatype)));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadInput(size_t i, const json& v, ModelInferRequest::InferInputTensor& input) {
  const std::string field = absl::StrCat("inputs[", i, "]");
  if (!v.is_object()) return Bad(field, "must be an object");
  for (auto item = v.begin(); item != v.end(); ++item) {
    const std::string& key = item.key();
    const json& value = item.value();
    if ((key == "name" || key == "datatype") && value.is_string()) {
      (key == "name" ? *input.mutable_name() : *input.mutable_datatype()) =
          value.get<std::string>();
    } else if (key == "shape" && value.is_array()) {
      for (const json& d : value) {
        if (!d.is_number_integer()) return Bad(field + ".shape", "must be integers");
        input.add_shape(d.get<int64_t>());
      }
    } else if (key == "parameters") {
      if (absl::Status s =
              ReadParameters(field + ".parameters", value, *input.mutable_parameters());
          !s.ok()) {
        return s;
      }
    } else if (key != "data") {
      return Bad(field, absl::StrCat("unknown field or wrong type: \"", BoundUserText(key), "\""));
    }
  }
  if (!v.contains("data")) return Bad(field, "data is required");
  return ReadData(field + ".data", input.datatype(), v["data"], *input.mutable_contents());
}

// A tensor's contents as a JSON array.
json Data(const inference::InferTensorContents& c) {
  json data = json::array();
  for (const std::string& b : c.bytes_contents()) data.push_back(b);
  for (const int32_t x : c.int_contents()) data.push_back(x);
  for (const int64_t x : c.int64_contents()) data.push_back(x);
  return data;
}

json Parameters(const google::protobuf::Map<std::string, InferParameter>& parameters) {
  json out = json::object();
  for (const auto& [name, p] : parameters) {
    switch (p.parameter_choice_case()) {
      case InferParameter::kBoolParam:
        out[name] = p.bool_param();
        break;
      case InferParameter::kInt64Param:
        out[name] = p.int64_param();
        break;
      case InferParameter::kUint64Param:
        out[name] = p.uint64_param();
        break;
      case InferParameter::kDoubleParam:
        out[name] = p.double_param();
        break;
      case InferParameter::kStringParam:
        out[name] = p.string_param();
        break;
      case InferParameter::PARAMETER_CHOICE_NOT_SET:
        break;
    }
  }
  return out;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The answers of infer, generate and generate_stream.
class OipFormat : public AnswerFormat {
 public:
  OipFormat(InferReply reply, bool generate) : reply_(std::move(reply)), generate_(generate) {}

  std::string Begin(const std::string& request_id, const HostedModel&) override {
    request_id_ = request_id;
    return "";
  }
  std::string Chunk(const StreamChunk& chunk, bool) override {
    v1::GenerateResponse piece;
    FillChunk(request_id_, chunk, &piece);
    return SseEvent(Answer(piece, nullptr));
  }
  std::string End(const StreamChunk&, const StreamSummary& summary) override {
    return SseEvent(Answer(v1::GenerateResponse(), &summary));
  }
  std::string Error(const absl::Status& status) override { return SseEvent(OipError(status)); }
  std::string Whole(const StreamChunk& all, const StreamSummary& summary) override {
    v1::GenerateResponse generated;
    FillChunk(request_id_, all, &generated);
    return Answer(generated, &summary);
  }
  absl::Status InTerms(const absl::Status& status) override { return InProtocolTerms(status); }
  std::string ErrorBody(const absl::Status& status) override { return OipError(status); }

 private:
  std::string Answer(const v1::GenerateResponse& generated, const StreamSummary* summary) const {
    ModelInferResponse response;
    FillInferResponse(reply_, generated, summary, &response);
    return generate_ ? GenerateResponseJson(response) : InferResponseJson(response);
  }

  const InferReply reply_;
  const bool generate_;
  std::string request_id_;
};

// /v2/models/{m}[/versions/{v}][/{action}] -> model, version, action.
struct ModelPath {
  std::string model;
  std::string version;
  std::string action;  // "", "ready", "infer", "generate", "generate_stream"
};

std::optional<ModelPath> ParseModelPath(const std::string& path) {
  const absl::string_view prefix = "/v2/models/";
  if (!absl::StartsWith(path, prefix)) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(path.substr(prefix.size()), '/');
  ModelPath out;
  if (parts.empty() || parts[0].empty()) return std::nullopt;
  out.model = parts[0];
  size_t next = 1;
  if (parts.size() > 2 && parts[1] == "versions") {
    out.version = parts[2];
    next = 3;
  }
  if (parts.size() == next + 1) {
    out.action = parts[next];
  } else if (parts.size() != next) {
    return std::nullopt;
  }
  if (out.action != "" && out.action != "ready" && out.action != "infer" &&
      out.action != "generate" && out.action != "generate_stream") {
    return std::nullopt;
  }
  return out;
}

}  // namespace

absl::StatusOr<ModelInferRequest> InferRequestFromJson(std::string_view body) {
  absl::StatusOr<json> parsed = io::ParseBoundedJson(body, "request body");
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) return Bad("request body", "must be a JSON object");
  ModelInferRequest request;
  for (auto item = parsed->begin(); item != parsed->end(); ++item) {
    const std::string& key = item.key();
    const json& v = item.value();
    if (key == "id" && v.is_string()) {
      request.set_id(v.get<std::string>());
    } else if (key == "parameters") {
      if (absl::Status s = ReadParameters("parameters", v, *request.mutable_parameters());
          !s.ok()) {
        return s;
      }
    } else if (key == "inputs" && v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (absl::Status s = ReadInput(i, v[i], *request.add_inputs()); !s.ok()) return s;
      }
    } else if (key == "outputs" && v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_object() || !v[i].contains("name") || !v[i]["name"].is_string()) {
          return Bad(absl::StrCat("outputs[", i, "]"), "must be an object with a name");
        }
        request.add_outputs()->set_name(v[i]["name"].get<std::string>());
      }
    } else {
      return Bad(BoundUserText(key), "unknown field or wrong type");
    }
  }
  return request;
}

absl::StatusOr<ModelInferRequest> GenerateRequestFromJson(std::string_view body) {
  absl::StatusOr<json> parsed = io::ParseBoundedJson(body, "request body");
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) return Bad("request body", "must be a JSON object");
  ModelInferRequest request;
  for (auto item = parsed->begin(); item != parsed->end(); ++item) {
    const std::string& key = item.key();
    const json& v = item.value();
    if (key == "parameters") {
      if (absl::Status s = ReadParameters("parameters", v, *request.mutable_parameters());
          !s.ok()) {
        return s;
      }
    } else if (key == "id" && v.is_string()) {
      request.set_id(v.get<std::string>());
    } else if (key == "text_input" || key == "source_text" || key == "input_ids" ||
               key == "source_ids") {
      ModelInferRequest::InferInputTensor* input = request.add_inputs();
      input->set_name(key);
      const bool text = absl::EndsWith(key, "_text") || key == "text_input";
      input->set_datatype(text ? "BYTES" : "INT32");
      if (absl::Status s = ReadData(key, input->datatype(), v, *input->mutable_contents());
          !s.ok()) {
        return s;
      }
      const int64_t n =
          text ? input->contents().bytes_contents_size() : input->contents().int_contents_size();
      input->add_shape(text ? 1 : n);
    } else if (absl::Status s =
                   ReadParameter(BoundUserText(key), v, (*request.mutable_parameters())[key]);
               !s.ok()) {
      return s;
    }
  }
  return request;
}

std::string InferResponseJson(const ModelInferResponse& response) {
  json outputs = json::array();
  for (const auto& o : response.outputs()) {
    outputs.push_back({{"name", o.name()},
                       {"datatype", o.datatype()},
                       {"shape", std::vector<int64_t>(o.shape().begin(), o.shape().end())},
                       {"data", Data(o.contents())}});
  }
  return Dump({{"model_name", response.model_name()},
               {"model_version", response.model_version()},
               {"id", response.id()},
               {"parameters", Parameters(response.parameters())},
               {"outputs", outputs}});
}

std::string GenerateResponseJson(const ModelInferResponse& response) {
  json out = Parameters(response.parameters());
  out["model_name"] = response.model_name();
  out["model_version"] = response.model_version();
  if (!response.id().empty()) out["id"] = response.id();
  for (const auto& o : response.outputs()) {
    const json data = Data(o.contents());
    out[o.name()] = o.datatype() == "BYTES" && data.size() == 1 ? data[0] : data;
  }
  return Dump(out);
}

OpenInferenceRest::OpenInferenceRest(ModelRepository& repository, OpenAiServiceOptions options)
    : repository_(repository), options_(std::move(options)) {}

bool OpenInferenceRest::Serves(std::string_view path) { return path.rfind("/v2/", 0) == 0; }

namespace {

const char* MethodOf(const std::string& action) {
  if (action.empty()) return "ModelMetadata";
  if (action == "ready") return "ModelReady";
  if (action == "infer") return "ModelInfer";
  if (action == "generate") return "generate";
  return "generate_stream";
}

json MetadataJson(const HostedModel& model) {
  inference::ModelMetadataResponse metadata;
  FillModelMetadata(model, &metadata);
  auto tensors = [](const auto& list) {
    json out = json::array();
    for (const auto& t : list) {
      out.push_back({{"name", t.name()},
                     {"datatype", t.datatype()},
                     {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}});
    }
    return out;
  };
  return {{"name", metadata.name()},
          {"versions",
           std::vector<std::string>(metadata.versions().begin(), metadata.versions().end())},
          {"platform", metadata.platform()},
          {"inputs", tensors(metadata.inputs())},
          {"outputs", tensors(metadata.outputs())}};
}

}  // namespace

void OpenInferenceRest::Handle(const HttpRequest& request,
                               const std::shared_ptr<HttpExchange>& exchange) {
  const std::string path = request.Path();
  if (path == "/v2/health/live" || path == "/v2/health/ready") {
    const bool ready = !repository_.draining();
    if (path == "/v2/health/live") {
      exchange->Respond(200, kJsonType, R"({"live":true})");
    } else {
      exchange->Respond(ready ? 200 : 503, kJsonType,
                        ready ? R"({"ready":true})" : R"({"ready":false})");
    }
    return;
  }
  const std::optional<ModelPath> target = ParseModelPath(path);
  if (!target.has_value()) {
    const absl::Status status =
        absl::NotFoundError(absl::StrCat("no route for ", BoundUserText(path)));
    exchange->Respond(404, kJsonType, OipError(status));
    return;
  }
  auto report = std::make_unique<CallReport>(options_.observers, MethodOf(target->action),
                                             request.peer, kKServeV2Protocol);
  const bool get = target->action.empty() || target->action == "ready";
  absl::Status status;
  if (request.method != (get ? "GET" : "POST")) {
    status =
        absl::InvalidArgumentError(absl::StrCat("method: ", path, " takes ", get ? "GET" : "POST",
                                                ", not ", BoundUserText(request.method)));
    exchange->Respond(405, kJsonType, OipError(status), {{"Allow", get ? "GET" : "POST"}});
    report->End(status);
    return;
  }
  status = CheckHttpCall(options_.start, request);
  absl::StatusOr<HostedModel*> model =
      status.ok() ? GeneratingModel(repository_, target->model, /*listing=*/"") : status;
  if (model.ok()) {
    status = CheckModelVersion(**model, target->version);
    if (status.ok()) report->record().model = (*model)->name;
  } else {
    status = model.status();
  }
  if (status.ok() && get) {
    exchange->Respond(200, kJsonType,
                      target->action.empty()
                          ? Dump(MetadataJson(**model))
                          : Dump({{"name", (*model)->name}, {"ready", !repository_.draining()}}));
    report->End(status);
    return;
  }
  absl::StatusOr<ModelInferRequest> infer = !status.ok() ? absl::StatusOr<ModelInferRequest>(status)
                                            : target->action == "infer"
                                                ? InferRequestFromJson(request.body)
                                                : GenerateRequestFromJson(request.body);
  absl::StatusOr<InferCall> call = absl::InternalError("no request");
  if (infer.ok()) {
    infer->set_model_name((*model)->name);
    call = ToGenerateRequest(*infer, **model);
  } else {
    call = infer.status();
  }
  if (!call.ok()) {
    RespondError(*exchange, report.get(), call.status(), -1, OipError(call.status()));
    return;
  }
  StartHttpGeneration(repository_, options_.start, request, exchange, call->generate,
                      target->action == "generate_stream",
                      std::make_unique<OipFormat>(call->reply, target->action != "infer"),
                      std::move(report));
}

}  // namespace performer::server
