// inference.GRPCInferenceService (the Open Inference Protocol) end to end in
// one process, beside performer.v1.Generation on the same in-process server
// over the repository's default model (models/performer-fortunes, a byte
// model), called through the stub generated from proto/inference. Every call
// carries a deadline.
#include "server/service/inference_service.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/server/service/in_process_server.h"

namespace performer::server {
namespace {

using in_process::ContextWithDeadline;
using in_process::InProcessServer;
using in_process::kDefaultModel;

constexpr char kPrompt[] = "The meaning of life is";
constexpr int kMaxTokens = 12;

// A ModelInferRequest for the default model: the prompt in
// text_input.contents.bytes_contents, greedy, kMaxTokens.
inference::ModelInferRequest TextRequest(const std::string& prompt, const std::string& id) {
  inference::ModelInferRequest request;
  request.set_model_name(kDefaultModel);
  request.set_id(id);
  auto* input = request.add_inputs();
  input->set_name("text_input");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents(prompt);
  (*request.mutable_parameters())["max_tokens"].set_int64_param(kMaxTokens);
  (*request.mutable_parameters())["temperature"].set_double_param(0.0);
  return request;
}

// A BYTES element as raw contents carry it: 4-byte little-endian length,
// then the bytes.
std::string RawBytes(const std::string& element) {
  std::string out;
  const auto length = static_cast<uint32_t>(element.size());
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>(length >> shift));
  return out + element;
}

const inference::ModelInferResponse::InferOutputTensor* Output(
    const inference::ModelInferResponse& response, const std::string& name) {
  for (const auto& output : response.outputs()) {
    if (output.name() == name) return &output;
  }
  return nullptr;
}

// A response parameter; the empty value when it is absent (so that a test
// fails rather than crashes).
inference::InferParameter Parameter(const inference::ModelInferResponse& response,
                                    const std::string& name) {
  auto it = response.parameters().find(name);
  return it == response.parameters().end() ? inference::InferParameter() : it->second;
}

bool IsFinal(const inference::ModelInferResponse& response) {
  return Parameter(response, "triton_final_response").bool_param();
}

std::string TextOutput(const inference::ModelInferResponse& response) {
  const auto* output = Output(response, "text_output");
  if (output == nullptr || output->contents().bytes_contents_size() != 1) return "<missing>";
  return output->contents().bytes_contents(0);
}

std::vector<int32_t> OutputIds(const inference::ModelInferResponse& response) {
  const auto* output = Output(response, "output_ids");
  if (output == nullptr) return {};
  return {output->contents().int_contents().begin(), output->contents().int_contents().end()};
}

class InferenceServiceTest : public in_process::SharedServerTest<InferenceServiceTest> {
 protected:
  static void SetUpTestSuite() {
    RepositoryOptions repository_options;
    repository_options.max_batch = 4;
    // A short pause per engine step, so that a stream's pieces come one by
    // one rather than merged for a reader that lags behind.
    repository_options.engine.step_delay = absl::Milliseconds(2);
    Share(InProcessServer::Start(repository_options, ServiceOptions()));
  }

  void SetUpClient() override { stub_ = server_->NewInferenceStub(); }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response) {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    return stub_->ModelInfer(context.get(), request, response);
  }

  // What performer.v1 Generate gives for the same prompt, greedy.
  v1::GenerateResponse Generate(const std::string& prompt) {
    v1::GenerateRequest request;
    request.set_model(kDefaultModel);
    request.set_prompt_text(prompt);
    request.set_max_new_tokens(kMaxTokens);
    request.set_temperature(0.0f);
    v1::GenerateResponse response;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    const grpc::Status status = server_->NewStub()->Generate(context.get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // ModelStreamInfer: writes every request, half-closes, reads every
  // response; then the status.
  struct StreamResult {
    std::vector<inference::ModelStreamInferResponse> responses;
    grpc::Status status;
  };
  StreamResult Stream(const std::vector<inference::ModelInferRequest>& requests) {
    StreamResult out;
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(60);
    auto stream = stub_->ModelStreamInfer(context.get());
    for (const auto& request : requests) EXPECT_TRUE(stream->Write(request));
    EXPECT_TRUE(stream->WritesDone());
    inference::ModelStreamInferResponse response;
    while (stream->Read(&response)) out.responses.push_back(response);
    out.status = stream->Finish();
    return out;
  }

  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(InferenceServiceTest, TheServerIsLiveAndReady) {
  inference::ServerLiveResponse live;
  std::unique_ptr<grpc::ClientContext> c1 = ContextWithDeadline();
  ASSERT_TRUE(stub_->ServerLive(c1.get(), inference::ServerLiveRequest(), &live).ok());
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  std::unique_ptr<grpc::ClientContext> c2 = ContextWithDeadline();
  ASSERT_TRUE(stub_->ServerReady(c2.get(), inference::ServerReadyRequest(), &ready).ok());
  EXPECT_TRUE(ready.ready());
  inference::ServerMetadataResponse metadata;
  std::unique_ptr<grpc::ClientContext> c3 = ContextWithDeadline();
  ASSERT_TRUE(stub_->ServerMetadata(c3.get(), inference::ServerMetadataRequest(), &metadata).ok());
  EXPECT_EQ(metadata.name(), "performer-serve");
}

TEST_F(InferenceServiceTest, ModelReadyKnowsTheModelAndItsOnlyVersion) {
  inference::ModelReadyRequest request;
  request.set_name(kDefaultModel);
  inference::ModelReadyResponse response;
  std::unique_ptr<grpc::ClientContext> c1 = ContextWithDeadline();
  ASSERT_TRUE(stub_->ModelReady(c1.get(), request, &response).ok());
  EXPECT_TRUE(response.ready());

  request.set_version("1");
  std::unique_ptr<grpc::ClientContext> c2 = ContextWithDeadline();
  ASSERT_TRUE(stub_->ModelReady(c2.get(), request, &response).ok());

  request.set_version("7");
  std::unique_ptr<grpc::ClientContext> c3 = ContextWithDeadline();
  const grpc::Status version = stub_->ModelReady(c3.get(), request, &response);
  EXPECT_EQ(version.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(version.error_message().find("\"7\""), std::string::npos) << version.error_message();

  request.set_name("no-such-model");
  request.clear_version();
  std::unique_ptr<grpc::ClientContext> c4 = ContextWithDeadline();
  const grpc::Status unknown = stub_->ModelReady(c4.get(), request, &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(unknown.error_message().find("no-such-model"), std::string::npos);
}

TEST_F(InferenceServiceTest, ModelMetadataListsTheTextAndTokenTensors) {
  inference::ModelMetadataRequest request;
  request.set_name(kDefaultModel);
  inference::ModelMetadataResponse metadata;
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  ASSERT_TRUE(stub_->ModelMetadata(context.get(), request, &metadata).ok());
  EXPECT_EQ(metadata.name(), kDefaultModel);
  ASSERT_EQ(metadata.versions_size(), 1);
  EXPECT_EQ(metadata.versions(0), "1");
  ASSERT_EQ(metadata.inputs_size(), 2);
  EXPECT_EQ(metadata.inputs(0).name(), "text_input");
  EXPECT_EQ(metadata.inputs(0).datatype(), "BYTES");
  EXPECT_EQ(
      std::vector<int64_t>(metadata.inputs(0).shape().begin(), metadata.inputs(0).shape().end()),
      std::vector<int64_t>{1});
  EXPECT_EQ(metadata.inputs(1).name(), "input_ids");
  EXPECT_EQ(metadata.inputs(1).datatype(), "INT32");
  ASSERT_EQ(metadata.outputs_size(), 2);
  EXPECT_EQ(metadata.outputs(0).name(), "text_output");
  EXPECT_EQ(metadata.outputs(0).datatype(), "BYTES");
  EXPECT_EQ(metadata.outputs(1).name(), "output_ids");
  EXPECT_EQ(metadata.outputs(1).datatype(), "INT32");

  request.set_name("no-such-model");
  std::unique_ptr<grpc::ClientContext> c2 = ContextWithDeadline();
  EXPECT_EQ(stub_->ModelMetadata(c2.get(), request, &metadata).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(InferenceServiceTest, ModelInferGeneratesWhatGenerateGivesAndEchoesTheId) {
  const v1::GenerateResponse expected = Generate(kPrompt);
  ASSERT_EQ(expected.token_ids_size(), kMaxTokens);

  inference::ModelInferResponse response;
  const grpc::Status status = Infer(TextRequest(kPrompt, "infer-1"), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.id(), "infer-1");
  EXPECT_EQ(response.model_name(), kDefaultModel);
  EXPECT_EQ(TextOutput(response), expected.text());
  EXPECT_EQ(OutputIds(response),
            std::vector<int32_t>(expected.token_ids().begin(), expected.token_ids().end()));
  EXPECT_TRUE(response.raw_output_contents().empty());
  EXPECT_EQ(Parameter(response, "finish_reason").string_param(), "length");
  EXPECT_EQ(Parameter(response, "generated_tokens").int64_param(), kMaxTokens);
  EXPECT_EQ(Parameter(response, "prompt_tokens").int64_param(), expected.usage().prompt_tokens());
}

TEST_F(InferenceServiceTest, RawInputContentsGetRawOutputContents) {
  const v1::GenerateResponse expected = Generate(kPrompt);
  inference::ModelInferRequest request = TextRequest(kPrompt, "raw-1");
  request.mutable_inputs(0)->clear_contents();
  request.add_raw_input_contents(RawBytes(kPrompt));
  request.add_outputs()->set_name("text_output");  // only the text

  inference::ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.id(), "raw-1");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "text_output");
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), RawBytes(expected.text()));
}

TEST_F(InferenceServiceTest, InputIdsAreThePromptAsTokens) {
  const v1::GenerateResponse expected = Generate(kPrompt);
  inference::ModelInferRequest request = TextRequest("", "ids-1");
  request.clear_inputs();
  auto* input = request.add_inputs();
  input->set_name("input_ids");
  input->set_datatype("INT32");
  const std::string prompt = kPrompt;
  input->add_shape(static_cast<int64_t>(prompt.size()));
  for (unsigned char byte : prompt) input->mutable_contents()->add_int_contents(byte);

  inference::ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::vector<int32_t> expected_ids(expected.token_ids().begin(), expected.token_ids().end());
  EXPECT_EQ(OutputIds(response), expected_ids);

  // The same ids as raw contents (little-endian INT32) get raw outputs.
  std::string raw;
  for (int32_t id : input->contents().int_contents()) {
    for (int shift = 0; shift < 32; shift += 8) raw.push_back(static_cast<char>(id >> shift));
  }
  input->clear_contents();
  request.add_raw_input_contents(raw);
  request.add_outputs()->set_name("output_ids");
  inference::ModelInferResponse raw_response;
  const grpc::Status raw_status = Infer(request, &raw_response);
  ASSERT_TRUE(raw_status.ok()) << raw_status.error_message();
  ASSERT_EQ(raw_response.raw_output_contents_size(), 1);
  const std::string& out = raw_response.raw_output_contents(0);
  ASSERT_EQ(out.size(), 4 * expected_ids.size());
  std::vector<int32_t> raw_ids;
  for (size_t i = 0; i < out.size(); i += 4) {
    uint32_t v = 0;
    for (int b = 3; b >= 0; --b) v = v << 8 | static_cast<unsigned char>(out[i + b]);
    raw_ids.push_back(static_cast<int32_t>(v));
  }
  EXPECT_EQ(raw_ids, expected_ids);
  ASSERT_EQ(raw_response.outputs_size(), 1);
  EXPECT_EQ(raw_response.outputs(0).shape(0), static_cast<int64_t>(expected_ids.size()));
}

TEST_F(InferenceServiceTest, AnUnknownModelIsNotFound) {
  inference::ModelInferRequest request = TextRequest(kPrompt, "nobody");
  request.set_model_name("no-such-model");
  inference::ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("no-such-model"), std::string::npos);
}

TEST_F(InferenceServiceTest, BadRequestsAreInvalidArgumentsNamingTheFault) {
  struct Case {
    const char* name;
    std::function<void(inference::ModelInferRequest*)> spoil;
    const char* message;  // a part of the error message
  };
  const std::vector<Case> cases = {
      {"max_tokens of the wrong kind",
       [](auto* r) { (*r->mutable_parameters())["max_tokens"].set_string_param("8"); },
       "parameter max_tokens"},
      {"max_tokens negative",
       [](auto* r) { (*r->mutable_parameters())["max_tokens"].set_int64_param(-3); },
       "parameter max_tokens"},
      {"max_tokens beyond int32",
       [](auto* r) { (*r->mutable_parameters())["max_tokens"].set_int64_param(int64_t{1} << 40); },
       "out of range"},
      {"unknown parameter",
       [](auto* r) { (*r->mutable_parameters())["max_new_tokens"].set_int64_param(8); },
       "parameter max_new_tokens: unknown"},
      {"temperature negative",
       [](auto* r) { (*r->mutable_parameters())["temperature"].set_double_param(-1); },
       "temperature"},
      {"two prompts",
       [](auto* r) {
         r->mutable_inputs(0)->mutable_contents()->add_bytes_contents("again");
         r->mutable_inputs(0)->set_shape(0, 2);
       },
       "one prompt"},
      {"wrong datatype", [](auto* r) { r->mutable_inputs(0)->set_datatype("FP32"); }, "BYTES"},
      {"unknown input", [](auto* r) { r->mutable_inputs(0)->set_name("prompt"); }, "input prompt"},
      {"no input", [](auto* r) { r->clear_inputs(); }, "no prompt"},
      {"truncated raw element",
       [](auto* r) {
         r->mutable_inputs(0)->clear_contents();
         r->add_raw_input_contents(RawBytes("hello").substr(0, 6));
       },
       "runs past"},
      {"unknown output", [](auto* r) { r->add_outputs()->set_name("logits"); }, "output logits"},
      {"raw INT32 of a partial element",
       [](auto* r) {
         r->clear_inputs();
         auto* ids = r->add_inputs();
         ids->set_name("input_ids");
         ids->set_datatype("INT32");
         ids->add_shape(2);
         r->add_raw_input_contents(std::string(6, 'a'));
       },
       "whole number"},
      {"shape disagreeing with the ids",
       [](auto* r) {
         r->clear_inputs();
         auto* ids = r->add_inputs();
         ids->set_name("input_ids");
         ids->set_datatype("INT32");
         ids->add_shape(3);
         ids->mutable_contents()->add_int_contents(65);
       },
       "declares 3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    inference::ModelInferRequest request = TextRequest(kPrompt, "bad");
    c.spoil(&request);
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find(c.message), std::string::npos) << status.error_message();
  }
}

TEST_F(InferenceServiceTest, ModelStreamInferStreamsPiecesThatMakeTheUnaryText) {
  inference::ModelInferResponse unary;
  ASSERT_TRUE(Infer(TextRequest(kPrompt, "unary"), &unary).ok());

  const StreamResult result = Stream({TextRequest(kPrompt, "stream-1")});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_GE(result.responses.size(), 2u) << "one response per piece, then a final one";
  std::string text;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < result.responses.size(); ++i) {
    const auto& r = result.responses[i];
    EXPECT_TRUE(r.error_message().empty()) << r.error_message();
    EXPECT_EQ(r.infer_response().id(), "stream-1");
    EXPECT_EQ(IsFinal(r.infer_response()), i + 1 == result.responses.size());
    text += TextOutput(r.infer_response());
    const std::vector<int32_t> piece = OutputIds(r.infer_response());
    ids.insert(ids.end(), piece.begin(), piece.end());
  }
  EXPECT_EQ(text, TextOutput(unary));
  EXPECT_EQ(ids, OutputIds(unary));
  const auto& last = result.responses.back().infer_response();
  EXPECT_EQ(Parameter(last, "finish_reason").string_param(), "length");
  EXPECT_EQ(Parameter(last, "generated_tokens").int64_param(), kMaxTokens);
}

TEST_F(InferenceServiceTest, AFailedRequestOnAStreamIsAnErrorResponseAndTheStreamGoesOn) {
  inference::ModelInferRequest unknown = TextRequest(kPrompt, "lost");
  unknown.set_model_name("no-such-model");
  inference::ModelInferRequest bad = TextRequest(kPrompt, "bad");
  (*bad.mutable_parameters())["top_p"].set_double_param(2.0);
  const StreamResult result = Stream({unknown, bad, TextRequest(kPrompt, "good")});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  std::map<std::string, std::string> errors;
  std::string text;
  bool good_final = false;
  for (const auto& r : result.responses) {
    const std::string& id = r.infer_response().id();
    if (!r.error_message().empty()) {
      errors[id] = r.error_message();
      continue;
    }
    EXPECT_EQ(id, "good");
    text += TextOutput(r.infer_response());
    if (IsFinal(r.infer_response())) {
      good_final = true;
    }
  }
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors["lost"].rfind("NOT_FOUND: ", 0), 0u) << errors["lost"];
  EXPECT_EQ(errors["bad"].rfind("INVALID_ARGUMENT: ", 0), 0u) << errors["bad"];
  EXPECT_NE(errors["bad"].find("top_p"), std::string::npos) << errors["bad"];
  EXPECT_TRUE(good_final);
  EXPECT_EQ(text, Generate(kPrompt).text());
}

// The id is echoed in every response: one over --max_request_id_bytes is
// refused (never echoed), and every field a client sends is quoted in an
// error message at most kMaxQuotedUserBytes long (plus its length).
TEST_F(InferenceServiceTest, UserTextIsBoundedInIdsAndErrors) {
  const std::string huge(1 << 20, 'x');
  inference::ModelInferResponse response;
  grpc::Status status = Infer(TextRequest(kPrompt, huge), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("id has 1048576 bytes; at most 128"), std::string::npos)
      << status.error_message();

  inference::ModelInferRequest version = TextRequest(kPrompt, "version");
  version.set_model_version(huge);
  status = Infer(version, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(status.error_message().size(), 300u);
  EXPECT_NE(status.error_message().find("(1048576 bytes)"), std::string::npos)
      << status.error_message();

  inference::ModelInferRequest output = TextRequest(kPrompt, "output");
  output.add_outputs()->set_name(huge);
  status = Infer(output, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(status.error_message().size(), 300u);

  inference::ModelInferRequest shape = TextRequest(kPrompt, "shape");
  // [1, 2, 1, 1, ...]: two elements declared, one sent.
  shape.mutable_inputs(0)->add_shape(2);
  for (int i = 0; i < 100000; ++i) shape.mutable_inputs(0)->add_shape(1);
  status = Infer(shape, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(status.error_message().size(), 300u);

  inference::ModelInferRequest unknown = TextRequest(kPrompt, "unknown");
  unknown.set_model_name(huge);
  const StreamResult result =
      Stream({TextRequest(kPrompt, huge), unknown, TextRequest(kPrompt, "good")});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  int errors = 0;
  bool good_final = false;
  for (const auto& r : result.responses) {
    EXPECT_LT(r.ByteSizeLong(), 1000u);
    if (!r.error_message().empty()) {
      ++errors;
      EXPECT_NE(r.infer_response().id(), huge);
      continue;
    }
    EXPECT_EQ(r.infer_response().id(), "good");
    good_final = good_final || IsFinal(r.infer_response());
  }
  EXPECT_EQ(errors, 2);
  EXPECT_TRUE(good_final);
}

TEST_F(InferenceServiceTest, IdsAreEchoedNotRequiredToBeUnique) {
  // Two live requests with one id (the engine's ids are the server's own).
  const StreamResult result = Stream({TextRequest(kPrompt, "same"), TextRequest(kPrompt, "same")});
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  int finals = 0;
  for (const auto& r : result.responses) {
    EXPECT_TRUE(r.error_message().empty()) << r.error_message();
    EXPECT_EQ(r.infer_response().id(), "same");
    if (IsFinal(r.infer_response())) ++finals;
  }
  EXPECT_EQ(finals, 2);
}

TEST_F(InferenceServiceTest, SeveralRequestsOnOneStreamAllComplete) {
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(TextRequest(kPrompt, "many-" + std::to_string(i)));
  const StreamResult result = Stream(requests);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  std::map<std::string, std::string> texts;
  int finals = 0;
  for (const auto& r : result.responses) {
    ASSERT_TRUE(r.error_message().empty()) << r.error_message();
    texts[r.infer_response().id()] += TextOutput(r.infer_response());
    if (IsFinal(r.infer_response())) ++finals;
  }
  EXPECT_EQ(finals, 6);
  const std::string expected = Generate(kPrompt).text();
  ASSERT_EQ(texts.size(), 6u);
  for (const auto& [id, text] : texts) EXPECT_EQ(text, expected) << id;
}

}  // namespace
}  // namespace performer::server
