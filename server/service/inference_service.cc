#include "server/service/inference_service.h"

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/logging/user_text.h"
#include "server/service/generation_rpc.h"
#include "server/service/open_inference.h"
#include "server/service/unparsable_request.h"

namespace performer::server {
namespace {

using inference::ModelInferRequest;
using inference::ModelStreamInferResponse;

grpc::Status InTerms(const grpc::Status& status) {
  return ToGrpc(InProtocolTerms(FromGrpc(status)));
}

// The generating model a request names, and the request as a generation of
// it; sets `record`'s model once known.
absl::StatusOr<InferCall> Prepare(ModelRepository& repository, const ModelInferRequest& request,
                                  RpcRecord& record) {
  record.request_id = EchoedInferId(request.id(), repository.request_bounds());
  if (absl::Status s =
          ValidateRequestId(request.id(), repository.request_bounds().max_request_id_bytes, "id");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<HostedModel*> model =
      GeneratingModel(repository, request.model_name(), /*listing=*/"");
  if (!model.ok()) return model.status();
  record.model = (*model)->name;
  if (absl::Status s = CheckModelVersion(**model, request.model_version()); !s.ok()) return s;
  return ToGenerateRequest(request, **model);
}

// The answer to a failed request on ModelStreamInfer.
void FillStreamError(const std::string& id, const std::string& model_name,
                     const grpc::Status& status, ModelStreamInferResponse* response) {
  response->set_error_message(
      absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                   ": ", status.error_message()));
  response->mutable_infer_response()->set_id(id);
  response->mutable_infer_response()->set_model_name(model_name);
}

}  // namespace

// ModelInfer: the whole generation, then one response.
class InferenceService::UnaryInfer final : public UnaryGenerator {
 public:
  UnaryInfer(grpc::CallbackServerContext* context, const std::vector<RpcObserver*>& observers,
             inference::ModelInferResponse* response)
      : UnaryGenerator(context, observers, "ModelInfer", kKServeV2Protocol, nullptr),
        response_(response) {}

  void Begin(ModelRepository& repository, const GenerationStart& start,
             grpc::CallbackServerContext* context, const ModelInferRequest& request) {
    absl::StatusOr<InferCall> call = Prepare(repository, request, record());
    if (!call.ok()) {
      FinishNow(ToGrpc(InProtocolTerms(call.status())));
      return;
    }
    reply_ = std::move(call->reply);
    const grpc::Status status = Start(repository, start, context, call->generate);
    if (!status.ok()) FinishNow(InTerms(status));
  }

 protected:
  grpc::Status Complete(const grpc::Status& status) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu()) {
    if (status.ok()) {
      const StreamSummary* summary = record().summary ? &*record().summary : nullptr;
      FillInferResponse(reply_, collected(), summary, response_);
    }
    return status;
  }

 private:
  inference::ModelInferResponse* response_;
  InferReply reply_;
};

// ModelStreamInfer (see the header for what is sent). One lock orders
// gRPC's reactions and the engine's notifications; the requests of the
// stream are served round-robin, one write at a time, so that no response is
// queued beyond the generations' own bounded buffers. Messages travel as
// bytes: Parse() reads each request, Write() serializes each response.
class InferenceService::StreamInfer final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamInfer(InferenceService& service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    ReactorLock lock(guard_.mu());
    ReadNext();
  }

  void OnReadDone(bool ok) override {
    ReactorLock lock(guard_.mu());
    reading_ = false;
    if (!ok) {
      reads_done_ = true;
    } else if (!stopping_ && Parse()) {
      Begin(request_);
      ReadNext();
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    ReactorLock lock(guard_.mu());
    writing_ = false;
    // A failed write: the client is gone.
    if (!ok) Stop();
    Pump();
  }

  void OnCancel() override {
    ReactorLock lock(guard_.mu());
    Stop();
    Pump();
  }

  void OnDone() override {
    guard_.Retire();
    delete this;
  }

 private:
  // One request of the stream, from its start to its last response.
  struct Generation {
    Generation(const std::vector<RpcObserver*>& observers,
               const grpc::CallbackServerContext* context)
        : scope(observers, "ModelStreamInfer", kKServeV2Protocol, context) {}
    RpcScope scope;
    InferReply reply;
    std::shared_ptr<RequestStream> stream;
  };

  // Everything below runs with the lock held.

  void ReadNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(guard_.mu()) {
    const size_t pending = running_.size() + errors_.size();
    if (reading_ || reads_done_ || stopping_ || pending >= kMaxStreamRequests) return;
    reading_ = true;
    StartRead(&request_bytes_);
  }

  // Parses the message just read into request_. One that does not parse
  // ends the stream: nothing more is read, the requests before it are
  // answered, then the call finishes with its INVALID_ARGUMENT; the
  // observers hear of it as one refused request of the stream, with no
  // model, as of an unparsable unary request (unparsable_request.h).
  bool Parse() ABSL_EXCLUSIVE_LOCKS_REQUIRED(guard_.mu()) {
    ++requests_read_;
    if (grpc::SerializationTraits<ModelInferRequest>::Deserialize(&request_bytes_, &request_)
            .ok()) {
      return true;
    }
    RpcScope scope(service_.options_.observers, "ModelStreamInfer", kKServeV2Protocol, context_);
    end_status_ = UnparsableRequestStatus(
        absl::StrCat("request ", requests_read_, " of the ModelStreamInfer stream"),
        "inference.ModelInferRequest");
    scope.End(scope.Sent(end_status_));
    reads_done_ = true;
    return false;
  }

  // Starts one request, or queues the error that answers it.
  void Begin(const ModelInferRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(guard_.mu()) {
    auto generation = std::make_unique<Generation>(service_.options_.observers, context_);
    Generation* g = generation.get();
    grpc::Status status;
    absl::StatusOr<InferCall> call = Prepare(service_.repository_, request, g->scope.record());
    if (!call.ok()) {
      status = ToGrpc(InProtocolTerms(call.status()));
    } else {
      g->reply = std::move(call->reply);
      GenerationStart start = StartSettings(service_.options_, /*streamed=*/true);
      start.retry_pushback_metadata = false;
      status = InTerms(StartGeneration(
          service_.repository_, start, context_, call->generate, g->scope.record(),
          [this, g](const std::string& /*request_id*/, std::shared_ptr<RequestStream> stream) {
            g->stream = std::move(stream);
            g->stream->SetListener(guard_.Listener([this] {
              guard_.mu().AssertHeld();
              Pump();
            }));
          }));
    }
    if (!status.ok()) {
      ModelStreamInferResponse error;
      FillStreamError(EchoedInferId(request.id(), service_.repository_.request_bounds()),
                      call.ok() ? g->reply.model_name : BoundUserText(request.model_name()), status,
                      &error);
      errors_.push_back(std::move(error));
      g->scope.End(g->scope.Sent(status));
      return;
    }
    running_.push_back(std::move(generation));
  }

  // Ends every request (the client is gone or cancelled the call).
  void Stop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(guard_.mu()) {
    if (stopping_) return;
    stopping_ = true;
    errors_.clear();
    for (const auto& g : running_) g->stream->RequestCancel(CancelReason(context_));
  }

  // Sends the next response, if one is ready and no write is in flight;
  // finishes the call once nothing is left to do.
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(guard_.mu()) {
    if (finished_) return;
    if (stopping_) {
      // Nothing more is sent; the requests are retired as the engine ends
      // them.
      for (auto it = running_.begin(); it != running_.end();) {
        RequestStream::Taken taken = (*it)->stream->Take();
        if (!taken.summary.has_value()) {
          ++it;
          continue;
        }
        (*it)->scope.record().summary = *taken.summary;
        (*it)->scope.End(ToGrpc(taken.summary->status));
        it = running_.erase(it);
      }
      MaybeFinish();
      return;
    }
    if (writing_) return;
    if (!errors_.empty()) {
      response_ = std::move(errors_.front());
      errors_.pop_front();
      ReadNext();
      Write();
      return;
    }
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      Generation& g = **it;
      RequestStream::Taken taken = g.stream->Take();
      if (taken.chunk.empty() && !taken.summary.has_value()) continue;
      response_.Clear();
      if (taken.summary.has_value()) {
        g.scope.record().summary = *taken.summary;
        const grpc::Status status = ToGrpc(taken.summary->status);
        if (SendsFinalMessage(*taken.summary)) {
          FillPiece(g, taken, /*final=*/true);
        } else {
          FillStreamError(g.reply.id, g.reply.model_name, status, &response_);
        }
        g.scope.End(g.scope.Sent(status));
        running_.erase(it);
        ReadNext();
      } else {
        FillPiece(g, taken, /*final=*/false);
        // Round-robin: the others go first next time.
        running_.splice(running_.end(), running_, it);
      }
      Write();
      return;
    }
    MaybeFinish();
  }

  void FillPiece(const Generation& g, const RequestStream::Taken& taken, bool final)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(guard_.mu()) {
    v1::GenerateResponse piece;
    FillChunk(g.reply.id, taken.chunk, &piece);
    inference::ModelInferResponse* out = response_.mutable_infer_response();
    FillInferResponse(g.reply, piece, final ? &*taken.summary : nullptr, out);
    (*out->mutable_parameters())["triton_final_response"].set_bool_param(final);
  }

  // Sends response_. One that does not serialize (protobuf's limit is
  // 2 GiB) ends the stream with that error.
  void Write() ABSL_EXCLUSIVE_LOCKS_REQUIRED(guard_.mu()) {
    // The buffer of the previous write is still held; serializing needs an
    // empty one.
    response_bytes_.Clear();
    bool own_buffer = false;
    const grpc::Status status = grpc::SerializationTraits<ModelStreamInferResponse>::Serialize(
        response_, &response_bytes_, &own_buffer);
    if (!status.ok()) {
      end_status_ = status;
      Stop();
      MaybeFinish();
      return;
    }
    writing_ = true;
    StartWrite(&response_bytes_);
  }

  void MaybeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(guard_.mu()) {
    if (finished_ || writing_ || !running_.empty() || !errors_.empty()) return;
    if (!stopping_ && !reads_done_) return;
    finished_ = true;
    // Stopped without an error of its own, the call was cancelled or its
    // client went away.
    Finish(stopping_ && end_status_.ok() ? CancelledStatus(context_) : end_status_);
  }

  InferenceService& service_;
  grpc::CallbackServerContext* context_;
  ReactorGuard guard_;
  std::list<std::unique_ptr<Generation>> running_ ABSL_GUARDED_BY(guard_.mu());
  // Answers to refused requests, not yet sent.
  std::deque<ModelStreamInferResponse> errors_ ABSL_GUARDED_BY(guard_.mu());
  grpc::ByteBuffer request_bytes_ ABSL_GUARDED_BY(guard_.mu());
  ModelInferRequest request_ ABSL_GUARDED_BY(guard_.mu());
  // Request messages read so far, one that does not parse included.
  int64_t requests_read_ ABSL_GUARDED_BY(guard_.mu()) = 0;
  ModelStreamInferResponse response_ ABSL_GUARDED_BY(guard_.mu());
  // response_ serialized, held until its write is done.
  grpc::ByteBuffer response_bytes_ ABSL_GUARDED_BY(guard_.mu());
  // What the call finishes with once its requests are answered: OK, or the
  // error that ended the stream early (a request that does not parse, a
  // response that does not serialize).
  grpc::Status end_status_ ABSL_GUARDED_BY(guard_.mu());
  bool reading_ ABSL_GUARDED_BY(guard_.mu()) = false;
  // Nothing more is read: the client half-closed, the call ended or a
  // request did not parse.
  bool reads_done_ ABSL_GUARDED_BY(guard_.mu()) = false;
  bool writing_ ABSL_GUARDED_BY(guard_.mu()) = false;
  // Cancelled, or the client went away.
  bool stopping_ ABSL_GUARDED_BY(guard_.mu()) = false;
  bool finished_ ABSL_GUARDED_BY(guard_.mu()) = false;
};

InferenceService::InferenceService(ModelRepository& repository, ServiceOptions options,
                                   absl::Duration liveness_stall)
    : repository_(repository), options_(std::move(options)), liveness_stall_(liveness_stall) {}

bool InferenceService::ModelServes(const HostedModel& model) const {
  return model.engine != nullptr && !repository_.draining() &&
         model.engine->Healthy(liveness_stall_);
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(
    grpc::CallbackServerContext* context, const inference::ServerLiveRequest* /*request*/,
    inference::ServerLiveResponse* response) {
  RpcScope scope(options_.observers, "ServerLive", kKServeV2Protocol, context);
  bool live = true;
  for (const auto& model : repository_.models()) {
    if (model->engine && !model->engine->Healthy(liveness_stall_)) live = false;
  }
  response->set_live(live);
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest* /*request*/,
    inference::ServerReadyResponse* response) {
  RpcScope scope(options_.observers, "ServerReady", kKServeV2Protocol, context);
  bool ready = !repository_.draining();
  for (const auto& model : repository_.models()) {
    // Encoder-only models take no inference requests here.
    if (model->engine && !ModelServes(*model)) ready = false;
  }
  response->set_ready(ready);
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  RpcScope scope(options_.observers, "ModelReady", kKServeV2Protocol, context);
  HostedModel* model = repository_.Find(request->name());
  if (model == nullptr) {
    return AnswerNow(context, scope,
                     ToGrpc(UnknownModelError("name", request->name(), /*listing=*/"")));
  }
  scope.record().model = model->name;
  if (absl::Status s = CheckModelVersion(*model, request->version()); !s.ok()) {
    return AnswerNow(context, scope, ToGrpc(s));
  }
  response->set_ready(ModelServes(*model));
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest* /*request*/,
    inference::ServerMetadataResponse* response) {
  RpcScope scope(options_.observers, "ServerMetadata", kKServeV2Protocol, context);
  response->set_name("performer-serve");
  // The version of the server's own API (performer.v1); no protocol
  // extension beyond ModelStreamInfer is implemented.
  response->set_version("1");
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  RpcScope scope(options_.observers, "ModelMetadata", kKServeV2Protocol, context);
  absl::StatusOr<HostedModel*> model =
      GeneratingModel(repository_, request->name(), /*listing=*/"");
  if (!model.ok()) return AnswerNow(context, scope, ToGrpc(model.status()));
  scope.record().model = (*model)->name;
  if (absl::Status s = CheckModelVersion(**model, request->version()); !s.ok()) {
    return AnswerNow(context, scope, ToGrpc(s));
  }
  FillModelMetadata(**model, response);
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  auto* infer = new UnaryInfer(context, options_.observers, response);
  const GenerationStart start = StartSettings(options_, /*streamed=*/false);
  infer->Begin(repository_, start, context, *request);
  return infer;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* InferenceService::ModelStreamInfer(
    grpc::CallbackServerContext* context) {
  return new StreamInfer(*this, context);
}

}  // namespace performer::server
