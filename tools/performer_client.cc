// performer-client: a command-line client for performer-serve's public API
// (performer.v1.Generation, proto/performer/v1/generation.proto).
//
//   performer-client [--server=localhost:50051] [--json] [--timeout=30s] COMMAND ...
//     list                 the hosted models, as a table (* = default model)
//     info [MODEL]         one model (empty = the default model)
//     generate PROMPT...   streams the new text (or token ids) to stdout,
//                          then a summary line on stderr
//     embed TEXT...        prints the vector(s)
//     cancel REQUEST_ID    cancels a running or queued request
//     export --session=ID --out=FILE   the session's state bytes (- = stdout)
//     import --session=ID --in=FILE    creates or replaces the session from them
//     delete --session=ID              forgets the session
//
// generate --session=ID continues session ID (--create_session starts it);
// the id goes both in the request and as the "x-session-id" metadata, on
// which a proxy routes, and so must be printable ASCII.
//
// --json prints the response messages as JSON (one object per line; one per
// streamed message for generate) with the .proto field names. Errors print
// "error: <STATUS_CODE>: <message>" on stderr and exit 1; usage errors exit
// 2; Ctrl-C cancels the call in flight and exits 130.
//
// Flags may stand anywhere on the line ("--" ends them). They are Abseil
// flags, but parsed here rather than by absl::ParseCommandLine, which exits
// with status 1 on a bad flag (2 is the usage-error convention) and cannot
// accumulate a repeated --stop.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "performer/v1/generation.grpc.pb.h"

// Every command.
ABSL_FLAG(std::string, server, "localhost:50051", "Server address (host:port).");
ABSL_FLAG(bool, tls, false, "Connect with TLS, trusting the system's CAs (see --tls_ca_file).");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle that the server's certificate must chain to; implies --tls.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate for a server with mutual TLS (with --tls_key_file).");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, token_file, "",
          "File whose first token (the server's token-file syntax) is sent as "
          "\"authorization: Bearer <token>\" with every call.");
ABSL_FLAG(bool, json, false, "Print the response messages as JSON, one object per line.");
ABSL_FLAG(absl::Duration, timeout, absl::ZeroDuration(),
          "Deadline of each call, e.g. 30s or 500ms; 0 = none.");
ABSL_FLAG(std::string, model, "",
          "Model name (generate, embed, export, import, delete); empty = the default model.");

// generate.
ABSL_FLAG(std::string, request_id, "", "Request id (to Cancel it from elsewhere); empty = new.");
ABSL_FLAG(int32_t, max_new_tokens, 0, "New tokens at most; 0 = the model's default.");
// std::optional so that an absent flag leaves the proto3 optional field
// unset: the server then applies the model's generation_config.json.
ABSL_FLAG(std::optional<float>, temperature, std::nullopt, "0 = greedy; unset = model default.");
ABSL_FLAG(int32_t, top_k, 0, "Keep the k most likely tokens; 0 = off.");
ABSL_FLAG(std::optional<float>, top_p, std::nullopt, "Nucleus sampling in (0, 1].");
ABSL_FLAG(std::optional<float>, repetition_penalty, std::nullopt,
          "> 1 penalizes tokens already in the context.");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt, "Seed for reproducible sampling.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "Stop string; repeatable and/or a comma list (\\, for a literal comma; C escapes "
          "such as \\n are decoded).");
ABSL_FLAG(std::vector<std::string>, stop_token_ids, {}, "Stop token ids, e.g. 1,2.");
ABSL_FLAG(std::vector<std::string>, tokens, {},
          "Prompt (generate) or input (embed) as token ids, e.g. 1,2,3, instead of text.");
ABSL_FLAG(std::optional<std::string>, source, std::nullopt,
          "Encoder input text of an encoder-decoder model.");
ABSL_FLAG(std::vector<std::string>, source_tokens, {},
          "Encoder input of an encoder-decoder model as token ids.");
ABSL_FLAG(bool, logprobs, false, "Ask for log-probabilities (printed on stderr at the end).");
ABSL_FLAG(bool, ignore_eos, false, "Do not stop at the model's eos token.");
ABSL_FLAG(bool, unary, false, "Use the unary Generate call instead of GenerateStream.");
ABSL_FLAG(int32_t, priority, 0, "Queue priority (higher is admitted first).");

// Sessions: generate, export, import, delete.
ABSL_FLAG(std::string, session, "",
          "Session id (printable ASCII): generate continues this session, export, import and "
          "delete name it. Also sent as the x-session-id metadata.");
ABSL_FLAG(bool, create_session, false,
          "generate: start session --session with this request (ALREADY_EXISTS if it exists); "
          "without it an unknown id is NOT_FOUND.");
ABSL_FLAG(std::string, out, "", "export: file to write the session's state bytes to; - = stdout.");
ABSL_FLAG(std::string, in, "", "import: file of state bytes written by export; - = stdin.");

// embed.
ABSL_FLAG(std::string, pooling, "", "mean (one vector) or none (one per token); empty = mean.");

namespace performer::client {
namespace {

namespace v1 = ::performer::v1;
using Clock = std::chrono::steady_clock;

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report it

// Largest session state that import reads and export receives: far above
// any model's state (399,496 B for the default model), and under the 2 GiB
// that a protobuf message can hold.
constexpr size_t kMaxStateBytes = size_t{1} << 30;

constexpr char kUsage[] =
    R"(usage: performer-client [--server=HOST:PORT] [--json] [--timeout=DURATION]
                       [--tls_ca_file=CA.pem [--tls_cert_file=C.pem --tls_key_file=K.pem]]
                       [--token_file=FILE] COMMAND ...

commands:
  list                     hosted models (* marks the default)
  info [MODEL]             one model (empty = the default)
  generate [flags] PROMPT...
      --model=M --max_new_tokens=N --temperature=T --top_k=K --top_p=P
      --repetition_penalty=R --seed=S --stop=STR (repeatable or comma list)
      --stop_token_ids=1,2 --tokens=1,2,3 (prompt as ids) --source=TEXT
      --source_tokens=1,2 (encoder-decoder input) --logprobs --ignore_eos
      --unary --priority=N --request_id=ID
      --session=ID: continue session ID (--create_session: start it); the
      summary line on stderr then gives its session_position (tokens seen)
  embed [--model=M] [--pooling=mean|none] TEXT... | --tokens=1,2,3
  cancel REQUEST_ID
  export --session=ID [--model=M] --out=FILE
                           the session's state bytes to FILE (- = stdout, not a
                           terminal); its position and tokens on stderr
  import --session=ID [--model=M] --in=FILE
                           create or replace the session from export's bytes
                           (- = stdin; at most 1 GiB); prints its position
  delete --session=ID [--model=M]
                           forget the session

The session id (printable ASCII) is also sent as the x-session-id metadata.

Run with --helpflags for every flag's description.
)";

// ---------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------

struct CommandLine {
  std::vector<std::string> args;  // positional: the command, then its words
  std::vector<std::string> stop;  // every --stop occurrence, in order
  bool help = false;
  bool help_flags = false;
};

absl::Status UsageError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// Sets the flags found in argv and returns the rest. Accepts --name=value,
// --name value, -name, --name / --noname for booleans, like Abseil.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  CommandLine line;
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      line.args.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    absl::string_view name = arg;
    std::optional<absl::string_view> value;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    if (name == "help" || name == "h") {
      line.help = true;
      continue;
    }
    if (name == "helpflags" || name == "helpfull") {
      line.help_flags = true;
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::ConsumePrefix(&name, "no")) {
      flag = absl::FindCommandLineFlag(name);
      if (flag == nullptr || !flag->IsOfType<bool>() || value.has_value()) {
        return UsageError(absl::StrCat("unknown flag --no", name));
      }
      value = "false";
    }
    if (flag == nullptr) return UsageError(absl::StrCat("unknown flag --", name));
    if (!value.has_value()) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return UsageError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    if (name == "stop") {
      line.stop.emplace_back(*value);
      continue;
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) {
      return UsageError(absl::StrCat("bad value for --", name, ": ", error));
    }
  }
  return line;
}

// "a,b\,c\n" -> {"a", "b,c<newline>"}: commas separate unless escaped, then
// C escapes are decoded. Empty pieces are dropped.
absl::StatusOr<std::vector<std::string>> SplitStopStrings(absl::string_view value) {
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '\\' && i + 1 < value.size()) {
      if (value[i + 1] == ',') {
        pieces.back() += ',';
      } else {
        // Kept escaped (a "\\" must not escape the comma after it).
        pieces.back().append(value.data() + i, 2);
      }
      ++i;
    } else if (value[i] == ',') {
      pieces.emplace_back();
    } else {
      pieces.back() += value[i];
    }
  }
  std::vector<std::string> out;
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    std::string decoded, error;
    if (!absl::CUnescape(piece, &decoded, &error)) {
      return UsageError(absl::StrCat("bad --stop value \"", piece, "\": ", error));
    }
    out.push_back(std::move(decoded));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseIds(absl::string_view flag_name,
                                              const std::vector<std::string>& items) {
  std::vector<int32_t> ids;
  for (const std::string& item : items) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(item, &id)) {
      return UsageError(
          absl::StrCat("--", flag_name, ": \"", item, "\" is not a token id (integers, 1,2,3)"));
    }
    ids.push_back(id);
  }
  return ids;
}

// ---------------------------------------------------------------------------
// Calls
// ---------------------------------------------------------------------------

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// Ctrl-C must cancel the call rather than kill the process, so that the
// server sees a clean RST_STREAM and frees the request's slot at once.
// SIGINT is blocked in every thread (main() blocks it before gRPC starts
// any), and while a call runs this watcher takes it synchronously with
// sigwaitinfo and calls TryCancel, which is not async-signal-safe and so
// cannot be called from a handler. A second Ctrl-C exits at once.
class InterruptWatcher {
 public:
  // Blocked in main() with SIGINT: the destructor wakes the watcher with it.
  static constexpr int kWakeSignal = SIGUSR2;

  explicit InterruptWatcher(grpc::ClientContext* context)
      : thread_([this, context] { Watch(context); }) {}
  ~InterruptWatcher() {
    done_ = true;
    pthread_kill(thread_.native_handle(), kWakeSignal);
    thread_.join();
  }
  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

  bool interrupted() const { return interrupted_; }

 private:
  void Watch(grpc::ClientContext* context) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, kWakeSignal);
    while (!done_) {
      if (sigwaitinfo(&set, nullptr) != SIGINT) continue;
      if (interrupted_.exchange(true)) _exit(kExitInterrupted);
      context->TryCancel();
    }
  }

  std::atomic<bool> done_{false};
  std::atomic<bool> interrupted_{false};
  std::thread thread_;
};

// Cancels `context` unless destroyed within `grace` (see RunGenerate).
class FinishWatchdog {
 public:
  FinishWatchdog(grpc::ClientContext* context, absl::Duration grace, bool* fired)
      : thread_([this, context, grace, fired] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(grace), [this] { return done_; })) {
            *fired = true;
            context->TryCancel();
          }
        }) {}
  ~FinishWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  FinishWatchdog(const FinishWatchdog&) = delete;
  FinishWatchdog& operator=(const FinishWatchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

struct Client {
  std::unique_ptr<v1::Generation::Stub> stub;
  absl::Duration timeout;
  bool json = false;
  std::string token;  // bearer token; empty = none

  // A call of session `session_id` (empty = none) also carries it as the
  // x-session-id metadata, on which a proxy routes (see CheckSessionId).
  void Prepare(grpc::ClientContext& context, const std::string& session_id = "") const {
    if (timeout > absl::ZeroDuration()) {
      context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
    }
    if (!token.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    if (!session_id.empty()) context.AddMetadata("x-session-id", session_id);
  }
};

// A session id travels as metadata too, whose values gRPC restricts to
// printable ASCII; and proxies may trim the spaces at its ends, after which
// it would no longer equal the request's session_id.
absl::Status CheckSessionId(const std::string& id) {
  for (char c : id) {
    if (c < 0x20 || c > 0x7e) {
      return UsageError(
          "--session: the id must be printable ASCII (it is also sent as the x-session-id "
          "metadata)");
    }
  }
  if (!id.empty() && (id.front() == ' ' || id.back() == ' ')) {
    return UsageError("--session: the id must not begin or end with a space");
  }
  return absl::OkStatus();
}

// The bytes of `path` (- = stdin) for --in, refusing more than
// kMaxStateBytes.
absl::StatusOr<std::string> ReadStateFile(const std::string& path) {
  const bool from_stdin = path == "-";
  const std::string name = from_stdin ? std::string("stdin") : path;
  std::FILE* file = from_stdin ? stdin : std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("--in: cannot read ", name, ": ", std::strerror(errno)));
  }
  auto too_large = [&name] {
    return absl::InvalidArgumentError(
        absl::StrCat("--in: ", name, " holds more than ", kMaxStateBytes >> 30,
                     " GiB, more than a session state can (is it a file from export?)"));
  };
  struct stat info;
  if (!from_stdin && fstat(fileno(file), &info) == 0 && S_ISREG(info.st_mode) &&
      static_cast<uint64_t>(info.st_size) > kMaxStateBytes) {
    std::fclose(file);
    return too_large();
  }
  std::string data;
  std::vector<char> buffer(1 << 16);
  bool over = false;
  int read_error = 0;
  while (true) {
    const size_t n = std::fread(buffer.data(), 1, buffer.size(), file);
    if (data.size() + n > kMaxStateBytes) {
      over = true;
      break;
    }
    data.append(buffer.data(), n);
    if (n < buffer.size()) {
      if (std::ferror(file)) read_error = errno;
      break;
    }
  }
  if (!from_stdin) std::fclose(file);
  if (over) return too_large();
  if (read_error != 0) {
    return absl::DataLossError(
        absl::StrCat("--in: cannot read ", name, ": ", std::strerror(read_error)));
  }
  return data;
}

// Writes `data` to `path` (- = stdout) for --out.
absl::Status WriteStateFile(const std::string& path, const std::string& data) {
  const bool to_stdout = path == "-";
  const std::string name = to_stdout ? std::string("stdout") : path;
  std::FILE* file = to_stdout ? stdout : std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("--out: cannot write ", name, ": ", std::strerror(errno)));
  }
  bool ok = std::fwrite(data.data(), 1, data.size(), file) == data.size();
  ok = std::fflush(file) == 0 && ok;
  int write_error = ok ? 0 : errno;
  if (!to_stdout && std::fclose(file) != 0 && ok) {
    ok = false;
    write_error = errno;
  }
  if (!ok) {
    return absl::DataLossError(
        absl::StrCat("--out: cannot write ", name, ": ", std::strerror(write_error)));
  }
  return absl::OkStatus();
}

// The whole of a small file, or an error naming `flag`.
absl::StatusOr<std::string> ReadFileFor(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The first token of a token file: the first field of its first line that
// is neither blank nor a comment.
absl::StatusOr<std::string> ReadToken(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileFor("--token_file", path);
  if (!text.ok()) return text.status();
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string token;
    if (fields >> token && token[0] != '#') return token;
  }
  return absl::InvalidArgumentError(absl::StrCat("--token_file: ", path, " holds no token"));
}

// Plaintext, or TLS when --tls or --tls_ca_file is set.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials() {
  const std::string ca = absl::GetFlag(FLAGS_tls_ca_file);
  const std::string cert = absl::GetFlag(FLAGS_tls_cert_file);
  const std::string key = absl::GetFlag(FLAGS_tls_key_file);
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file go together");
  }
  if (!absl::GetFlag(FLAGS_tls) && ca.empty() && cert.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  if (!ca.empty()) {
    absl::StatusOr<std::string> roots = ReadFileFor("--tls_ca_file", ca);
    if (!roots.ok()) return roots.status();
    options.pem_root_certs = *roots;
  }
  if (!cert.empty()) {
    absl::StatusOr<std::string> chain = ReadFileFor("--tls_cert_file", cert);
    if (!chain.ok()) return chain.status();
    absl::StatusOr<std::string> private_key = ReadFileFor("--tls_key_file", key);
    if (!private_key.ok()) return private_key.status();
    options.pem_cert_chain = *chain;
    options.pem_private_key = *private_key;
  }
  return grpc::SslCredentials(options);
}

// Prints the error line and returns the exit status for `status`.
int ReportRpcError(const grpc::Status& status, const grpc::ClientContext& context,
                   bool interrupted) {
  if (interrupted && status.error_code() == grpc::StatusCode::CANCELLED) {
    std::fprintf(stderr, "cancelled (interrupted)\n");
    return kExitInterrupted;
  }
  std::string line =
      absl::StrCat("error: ", StatusCodeName(status.error_code()), ": ", status.error_message());
  // The server's retry hint for RESOURCE_EXHAUSTED (slots and queue full).
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find("grpc-retry-pushback-ms"); it != trailers.end()) {
    absl::StrAppend(&line, " [grpc-retry-pushback-ms=",
                    absl::string_view(it->second.data(), it->second.size()), "]");
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  return kExitError;
}

void PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // The .proto names (token_ids, finish_reason), which is what the API
  // documentation and other clients use, rather than lowerCamelCase.
  options.preserve_proto_field_names = true;
  std::string out;
  if (auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
      !status.ok()) {
    out = absl::StrCat("{\"error\": \"", absl::CEscape(status.ToString()), "\"}");
  }
  std::fprintf(stdout, "%s\n", out.c_str());
  std::fflush(stdout);
}

std::string LowerEnumSuffix(const std::string& name, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(name, prefix));
}

std::string KindName(v1::ModelKind kind) {
  return absl::StrReplaceAll(LowerEnumSuffix(v1::ModelKind_Name(kind), "MODEL_KIND_"),
                             {{"_", "-"}});
}

std::string FinishReasonName(v1::FinishReason reason) {
  return LowerEnumSuffix(v1::FinishReason_Name(reason), "FINISH_REASON_");
}

std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", value, units[unit]);
}

// ---------------------------------------------------------------------------
// list, info, cancel
// ---------------------------------------------------------------------------

int RunList(const Client& client) {
  grpc::ClientContext context;
  client.Prepare(context);
  v1::ListModelsResponse response;
  InterruptWatcher watcher(&context);
  grpc::Status status = client.stub->ListModels(&context, v1::ListModelsRequest(), &response);
  if (!status.ok()) return ReportRpcError(status, context, watcher.interrupted());
  if (client.json) {
    PrintJson(response);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"", "NAME", "KIND", "VOCAB", "MAX LEN",
                                                 "TOKENIZER", "STATE/SEQ", "SLOTS", "ACTIVE",
                                                 "QUEUED", "READY"}};
  for (const v1::ModelInfo& m : response.models()) {
    rows.push_back(
        {m.name() == response.default_model() ? "*" : "", m.name(), KindName(m.kind()),
         absl::StrCat(m.vocab_size()), absl::StrCat(m.max_sequence_length()),
         m.tokenizer().empty() ? "-" : m.tokenizer(),
         // Encoder-only models keep no decode state.
         m.state_bytes_per_sequence() > 0 ? HumanBytes(m.state_bytes_per_sequence()) : "-",
         absl::StrCat(m.max_sequences()), absl::StrCat(m.active_sequences()),
         absl::StrCat(m.queued_requests()), m.ready() ? "yes" : "no"});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  // Numbers right-aligned so that magnitudes compare at a glance.
  const std::vector<bool> numeric = {false, false, false, true, true, false,
                                     true,  true,  true,  true, false};
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      const int w = static_cast<int>(width[c]);
      absl::StrAppend(&line, numeric[c] ? absl::StrFormat("%*s", w, row[c])
                                        : absl::StrFormat("%-*s", w, row[c]));
    }
    std::printf("%s\n", std::string(absl::StripTrailingAsciiWhitespace(line)).c_str());
  }
  if (response.models().empty()) std::printf("(no models)\n");
  return 0;
}

int RunInfo(const Client& client, const std::string& name) {
  grpc::ClientContext context;
  client.Prepare(context);
  v1::GetModelRequest request;
  request.set_name(name);
  v1::ModelInfo m;
  InterruptWatcher watcher(&context);
  grpc::Status status = client.stub->GetModel(&context, request, &m);
  if (!status.ok()) return ReportRpcError(status, context, watcher.interrupted());
  if (client.json) {
    PrintJson(m);
    return 0;
  }
  std::printf("name:                     %s\n", m.name().c_str());
  std::printf("kind:                     %s\n", KindName(m.kind()).c_str());
  std::printf("vocab_size:               %d\n", m.vocab_size());
  std::printf("max_sequence_length:      %d\n", m.max_sequence_length());
  std::printf("tokenizer:                %s\n",
              m.tokenizer().empty() ? "none (token ids only)" : m.tokenizer().c_str());
  std::printf("state_bytes_per_sequence: %lld (%s)\n",
              static_cast<long long>(m.state_bytes_per_sequence()),
              HumanBytes(m.state_bytes_per_sequence()).c_str());
  if (!m.weight_dtype().empty()) {
    std::printf("weights:                  %s, %lld (%s)\n", m.weight_dtype().c_str(),
                static_cast<long long>(m.weight_bytes()), HumanBytes(m.weight_bytes()).c_str());
  }
  std::printf("max_sequences:            %d\n", m.max_sequences());
  std::printf("active_sequences:         %d\n", m.active_sequences());
  std::printf("queued_requests:          %d\n", m.queued_requests());
  std::printf("ready:                    %s\n", m.ready() ? "yes" : "no");
  return 0;
}

int RunCancel(const Client& client, const std::string& request_id) {
  grpc::ClientContext context;
  client.Prepare(context);
  v1::CancelRequest request;
  request.set_request_id(request_id);
  v1::CancelResponse response;
  InterruptWatcher watcher(&context);
  grpc::Status status = client.stub->Cancel(&context, request, &response);
  if (!status.ok()) return ReportRpcError(status, context, watcher.interrupted());
  if (client.json) {
    PrintJson(response);
  } else {
    std::printf("%s\n", response.cancelled()
                            ? "cancelled"
                            : "not cancelled: no live request has this id (finished or unknown)");
  }
  return 0;
}

// ---------------------------------------------------------------------------
// generate
// ---------------------------------------------------------------------------

absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const std::vector<std::string>& words,
                                                         const std::vector<std::string>& stop) {
  v1::GenerateRequest request;
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  request.set_model(absl::GetFlag(FLAGS_model));

  const std::vector<std::string> prompt_ids = absl::GetFlag(FLAGS_tokens);
  if (!prompt_ids.empty() && !words.empty()) {
    return UsageError("give the prompt as text or as --tokens, not both");
  }
  if (!prompt_ids.empty()) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseIds("tokens", prompt_ids);
    if (!ids.ok()) return ids.status();
    request.mutable_prompt_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());
  } else if (!words.empty()) {
    request.set_prompt_text(absl::StrJoin(words, " "));
  }
  // Neither: the oneof stays unset, which an encoder-decoder model reads as
  // "start from the decoder start token" (a decoder model refuses it).

  const std::optional<std::string> source = absl::GetFlag(FLAGS_source);
  const std::vector<std::string> source_ids = absl::GetFlag(FLAGS_source_tokens);
  if (source.has_value() && !source_ids.empty()) {
    return UsageError("give the source as --source or --source_tokens, not both");
  }
  if (source.has_value()) request.set_source_text(*source);
  if (!source_ids.empty()) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseIds("source_tokens", source_ids);
    if (!ids.ok()) return ids.status();
    request.mutable_source_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());
  }

  request.set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  if (auto t = absl::GetFlag(FLAGS_temperature)) request.set_temperature(*t);
  request.set_top_k(absl::GetFlag(FLAGS_top_k));
  if (auto p = absl::GetFlag(FLAGS_top_p)) request.set_top_p(*p);
  if (auto r = absl::GetFlag(FLAGS_repetition_penalty)) request.set_repetition_penalty(*r);
  if (auto s = absl::GetFlag(FLAGS_seed)) request.set_seed(*s);
  absl::StatusOr<std::vector<int32_t>> stop_ids =
      ParseIds("stop_token_ids", absl::GetFlag(FLAGS_stop_token_ids));
  if (!stop_ids.ok()) return stop_ids.status();
  request.mutable_stop_token_ids()->Assign(stop_ids->begin(), stop_ids->end());
  for (const std::string& value : stop) {
    absl::StatusOr<std::vector<std::string>> pieces = SplitStopStrings(value);
    if (!pieces.ok()) return pieces.status();
    for (std::string& piece : *pieces) request.add_stop_strings(std::move(piece));
  }
  request.set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  request.set_return_logprobs(absl::GetFlag(FLAGS_logprobs));
  request.set_priority(absl::GetFlag(FLAGS_priority));

  const std::string session = absl::GetFlag(FLAGS_session);
  const bool create_session = absl::GetFlag(FLAGS_create_session);
  if (create_session && session.empty()) {
    return UsageError("--create_session needs --session=ID");
  }
  request.set_session_id(session);
  request.set_create_session(create_session);
  return request;
}

// What a generate call produced, as seen by the client.
struct GenerateTally {
  std::string request_id;
  std::string session_id;        // the request's; empty = none
  int64_t session_position = 0;  // the latest message's that gave one
  int64_t tokens = 0;
  std::vector<std::pair<int32_t, float>> logprobs;
  std::optional<double> first_token_seconds;  // from the call's start
  v1::GenerateResponse last;                  // finish_reason, usage, timings
  bool printed_any = false;
  bool ends_with_newline = false;
};

// Prints one message's new output (text, or token ids for a model without a
// tokenizer) and counts it.
void Consume(const v1::GenerateResponse& response, bool as_text, bool json,
             std::optional<double> seconds, GenerateTally& tally) {
  if (!response.request_id().empty()) tally.request_id = response.request_id();
  if (response.session_position() > 0) tally.session_position = response.session_position();
  if (response.token_ids_size() > 0 && !tally.first_token_seconds) {
    tally.first_token_seconds = seconds;
  }
  tally.tokens += response.token_ids_size();
  for (int i = 0; i < response.logprobs_size() && i < response.token_ids_size(); ++i) {
    tally.logprobs.emplace_back(response.token_ids(i), response.logprobs(i));
  }
  if (json) {
    PrintJson(response);
    return;
  }
  std::string out;
  if (as_text) {
    out = response.text();
  } else {
    for (int32_t id : response.token_ids()) {
      absl::StrAppend(&out, tally.printed_any || !out.empty() ? " " : "", id);
    }
  }
  if (out.empty()) return;
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  tally.printed_any = true;
  tally.ends_with_newline = out.back() == '\n';
}

void PrintSummary(const GenerateTally& tally, double total_seconds, bool cancelled_here) {
  const v1::GenerateResponse& last = tally.last;
  const int64_t generated =
      last.has_usage() ? last.usage().generated_tokens() : static_cast<int64_t>(tally.tokens);
  std::string line = absl::StrCat(
      "finish=", cancelled_here ? "cancelled" : FinishReasonName(last.finish_reason()));
  if (!tally.request_id.empty()) absl::StrAppend(&line, " request_id=", tally.request_id);
  if (last.has_usage()) absl::StrAppend(&line, " prompt_tokens=", last.usage().prompt_tokens());
  absl::StrAppend(&line, " generated_tokens=", generated);
  if (!tally.session_id.empty()) {
    absl::StrAppend(&line, " session=", tally.session_id,
                    " session_position=", tally.session_position);
  }
  if (tally.first_token_seconds) {
    absl::StrAppend(&line, absl::StrFormat(" ttft=%.1fms", *tally.first_token_seconds * 1e3));
  }
  absl::StrAppend(&line, absl::StrFormat(" total=%.3fs", total_seconds));
  if (total_seconds > 0) {
    absl::StrAppend(&line, absl::StrFormat(" tokens/s=%.1f", generated / total_seconds));
  }
  if (last.has_timings()) {
    const v1::Timings& t = last.timings();
    absl::StrAppend(
        &line,
        absl::StrFormat(" (server: queue=%.1fms ttft=%.1fms total=%.3fs)", t.queue_seconds() * 1e3,
                        t.time_to_first_token_seconds() * 1e3, t.total_seconds()));
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  if (!tally.logprobs.empty()) {
    std::string lp = "logprobs:";
    for (const auto& [id, logprob] : tally.logprobs) {
      absl::StrAppend(&lp, absl::StrFormat(" %d:%.4f", id, logprob));
    }
    std::fprintf(stderr, "%s\n", lp.c_str());
  }
}

// Whether the model returns text: without a tokenizer only ids are useful.
// Asked up front because a streamed message's empty text does not tell
// (text is held back until a UTF-8 character is complete).
absl::StatusOr<bool> ModelHasTokenizer(const Client& client, const std::string& model,
                                       int* exit_code) {
  grpc::ClientContext context;
  client.Prepare(context);
  v1::GetModelRequest request;
  request.set_name(model);
  v1::ModelInfo info;
  InterruptWatcher watcher(&context);
  grpc::Status status = client.stub->GetModel(&context, request, &info);
  if (!status.ok()) {
    *exit_code = ReportRpcError(status, context, watcher.interrupted());
    return absl::UnknownError("GetModel failed");
  }
  return !info.tokenizer().empty();
}

int RunGenerate(const Client& client, const std::vector<std::string>& words,
                const std::vector<std::string>& stop) {
  absl::StatusOr<v1::GenerateRequest> request = BuildGenerateRequest(words, stop);
  if (!request.ok()) {
    std::fprintf(stderr, "performer-client: %s\n", std::string(request.status().message()).c_str());
    return kExitUsage;
  }
  bool as_text = false;
  if (!client.json) {
    int exit_code = 0;
    absl::StatusOr<bool> has_tokenizer = ModelHasTokenizer(client, request->model(), &exit_code);
    if (!has_tokenizer.ok()) return exit_code;
    as_text = *has_tokenizer;
  }

  grpc::ClientContext context;
  client.Prepare(context, request->session_id());
  GenerateTally tally;
  tally.session_id = request->session_id();
  grpc::Status status;
  const Clock::time_point start = Clock::now();
  auto since_start = [&start] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  bool interrupted = false;
  double total_seconds = 0;
  {
    InterruptWatcher watcher(&context);
    if (absl::GetFlag(FLAGS_unary)) {
      status = client.stub->Generate(&context, *request, &tally.last);
      // No time to first token: the reply arrives whole.
      if (status.ok()) Consume(tally.last, as_text, client.json, std::nullopt, tally);
    } else {
      std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
          client.stub->GenerateStream(&context, *request);
      v1::GenerateResponse response;
      bool got_last = false;  // the message with finish_reason
      while (reader->Read(&response)) {
        Consume(response, as_text, client.json, since_start(), tally);
        got_last = response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
        tally.last = std::move(response);
        response.Clear();
      }
      // Read also returns false when a message fails to parse, and gRPC
      // then leaves the call open: Finish would wait for the deadline, or
      // forever. A stream that ended with an error status has its status at
      // once, so a Finish that takes long means the former: cancel it.
      bool broken = false;
      {
        std::optional<FinishWatchdog> watchdog;
        if (!got_last) watchdog.emplace(&context, absl::Seconds(2), &broken);
        status = reader->Finish();
      }
      if (broken && status.error_code() == grpc::StatusCode::CANCELLED) {
        status = grpc::Status(grpc::StatusCode::INTERNAL,
                              "the stream broke off before its last message: a response could "
                              "not be parsed (e.g. text that is not valid UTF-8)");
      }
    }
    total_seconds = since_start();
    interrupted = watcher.interrupted();
  }
  // End the output line on a terminal, so the prompt does not follow the
  // text; piped output stays exactly what the server sent.
  if (tally.printed_any && !client.json && (!as_text || !tally.ends_with_newline) &&
      isatty(STDOUT_FILENO)) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!status.ok()) {
    const bool cancelled_here = interrupted && status.error_code() == grpc::StatusCode::CANCELLED;
    // A request cancelled (Cancel RPC) or past its deadline still gets its
    // last message, finish_reason and usage, before the error status.
    if (cancelled_here || tally.last.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      PrintSummary(tally, total_seconds, cancelled_here);
    }
    return ReportRpcError(status, context, interrupted);
  }
  PrintSummary(tally, total_seconds, /*cancelled_here=*/false);
  return 0;
}

// ---------------------------------------------------------------------------
// embed
// ---------------------------------------------------------------------------

int RunEmbed(const Client& client, const std::vector<std::string>& words) {
  v1::EmbedRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  const std::vector<std::string> token_items = absl::GetFlag(FLAGS_tokens);
  if (!token_items.empty() && !words.empty()) {
    std::fprintf(stderr, "performer-client: give the input as text or as --tokens, not both\n");
    return kExitUsage;
  }
  if (!token_items.empty()) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseIds("tokens", token_items);
    if (!ids.ok()) {
      std::fprintf(stderr, "performer-client: %s\n", std::string(ids.status().message()).c_str());
      return kExitUsage;
    }
    request.mutable_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());
  } else if (!words.empty()) {
    request.set_text(absl::StrJoin(words, " "));
  } else {
    std::fprintf(stderr, "performer-client: embed needs TEXT or --tokens\n");
    return kExitUsage;
  }
  const std::string pooling = absl::GetFlag(FLAGS_pooling);
  if (pooling == "mean") {
    request.set_pooling(v1::POOLING_MEAN);
  } else if (pooling == "none") {
    request.set_pooling(v1::POOLING_NONE);
  } else if (!pooling.empty()) {
    std::fprintf(stderr, "performer-client: --pooling must be mean or none, not \"%s\"\n",
                 pooling.c_str());
    return kExitUsage;
  }

  grpc::ClientContext context;
  client.Prepare(context);
  v1::EmbedResponse response;
  InterruptWatcher watcher(&context);
  grpc::Status status = client.stub->Embed(&context, request, &response);
  if (!status.ok()) return ReportRpcError(status, context, watcher.interrupted());
  if (client.json) {
    PrintJson(response);
    return 0;
  }
  // One line per vector: [dim] when pooled, [tokens, dim] row by row.
  const int dim = response.dim() > 0 ? response.dim() : response.values_size();
  for (int i = 0; i < response.values_size(); ++i) {
    std::printf("%s%.6g", i % dim == 0 ? "" : " ", response.values(i));
    if ((i + 1) % dim == 0 || i + 1 == response.values_size()) std::printf("\n");
  }
  std::fprintf(stderr, "dim=%d tokens=%d vectors=%d\n", response.dim(), response.tokens(),
               dim > 0 ? response.values_size() / dim : 0);
  return 0;
}

// ---------------------------------------------------------------------------
// export, import, delete
// ---------------------------------------------------------------------------

int RunExport(const Client& client, const std::string& session_id, const std::string& out) {
  v1::ExportSessionRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  request.set_session_id(session_id);
  grpc::ClientContext context;
  client.Prepare(context, session_id);
  v1::SessionState state;
  InterruptWatcher watcher(&context);
  grpc::Status status = client.stub->ExportSession(&context, request, &state);
  if (!status.ok()) return ReportRpcError(status, context, watcher.interrupted());
  if (absl::Status written = WriteStateFile(out, state.data()); !written.ok()) {
    std::fprintf(stderr, "performer-client: %s\n", std::string(written.message()).c_str());
    return kExitError;
  }
  if (client.json) {
    // The state's description; its bytes went to --out.
    state.clear_data();
    PrintJson(state);
    return 0;
  }
  std::fprintf(stderr, "exported session=%s model=%s position=%lld tokens=%lld bytes=%zu to %s\n",
               state.session_id().c_str(), state.model().c_str(),
               static_cast<long long>(state.position()), static_cast<long long>(state.tokens()),
               state.data().size(), out == "-" ? "stdout" : out.c_str());
  return 0;
}

int RunImport(const Client& client, const std::string& session_id, const std::string& in) {
  absl::StatusOr<std::string> data = ReadStateFile(in);
  if (!data.ok()) {
    std::fprintf(stderr, "performer-client: %s\n", std::string(data.status().message()).c_str());
    return kExitUsage;
  }
  v1::ImportSessionRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  request.set_session_id(session_id);
  request.set_data(*std::move(data));
  grpc::ClientContext context;
  client.Prepare(context, session_id);
  v1::ImportSessionResponse response;
  InterruptWatcher watcher(&context);
  grpc::Status status = client.stub->ImportSession(&context, request, &response);
  if (!status.ok()) return ReportRpcError(status, context, watcher.interrupted());
  if (client.json) {
    PrintJson(response);
  } else {
    std::printf("imported session=%s position=%lld\n", session_id.c_str(),
                static_cast<long long>(response.position()));
  }
  return 0;
}

int RunDelete(const Client& client, const std::string& session_id) {
  v1::DeleteSessionRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  request.set_session_id(session_id);
  grpc::ClientContext context;
  client.Prepare(context, session_id);
  v1::DeleteSessionResponse response;
  InterruptWatcher watcher(&context);
  grpc::Status status = client.stub->DeleteSession(&context, request, &response);
  if (!status.ok()) return ReportRpcError(status, context, watcher.interrupted());
  if (client.json) {
    PrintJson(response);
  } else {
    std::printf("deleted session=%s\n", session_id.c_str());
  }
  return 0;
}

void PrintFlagHelp() {
  std::printf("%s\nflags:\n", kUsage);
  for (const char* name :
       {"server",         "json",        "timeout",        "model",         "request_id",
        "max_new_tokens", "temperature", "top_k",          "top_p",         "repetition_penalty",
        "seed",           "stop",        "stop_token_ids", "tokens",        "source",
        "source_tokens",  "logprobs",    "ignore_eos",     "unary",         "priority",
        "pooling",        "tls",         "tls_ca_file",    "tls_cert_file", "tls_key_file",
        "token_file",     "session",     "create_session", "out",           "in"}) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    std::printf("  --%s  %s (default: \"%s\")\n", name, flag->Help().c_str(),
                flag->DefaultValue().c_str());
  }
}

int Main(int argc, char** argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (!line.ok()) {
    std::fprintf(stderr, "performer-client: %s (--help for usage)\n",
                 std::string(line.status().message()).c_str());
    return kExitUsage;
  }
  if (line->help_flags) {
    PrintFlagHelp();
    return 0;
  }
  if (line->help) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (line->args.empty()) {
    std::fprintf(stderr, "performer-client: no command\n\n%s", kUsage);
    return kExitUsage;
  }
  const std::string command = line->args[0];
  const std::vector<std::string> words(line->args.begin() + 1, line->args.end());
  auto usage = [](const std::string& message) {
    std::fprintf(stderr, "performer-client: %s (--help for usage)\n", message.c_str());
    return kExitUsage;
  };
  if (!line->stop.empty() && command != "generate") {
    return usage("--stop only applies to generate");
  }
  const std::string session = absl::GetFlag(FLAGS_session);
  const bool session_command = command == "export" || command == "import" || command == "delete";
  if (!session.empty() && command != "generate" && !session_command) {
    return usage("--session only applies to generate, export, import and delete");
  }
  if (absl::GetFlag(FLAGS_create_session) && command != "generate") {
    return usage("--create_session only applies to generate (import creates a session itself)");
  }
  if (!absl::GetFlag(FLAGS_out).empty() && command != "export") {
    return usage("--out only applies to export");
  }
  if (!absl::GetFlag(FLAGS_in).empty() && command != "import") {
    return usage("--in only applies to import");
  }
  if (absl::Status valid = CheckSessionId(session); !valid.ok()) {
    return usage(std::string(valid.message()));
  }

  Client client;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = ChannelCredentials();
  if (!credentials.ok()) return usage(std::string(credentials.status().message()));
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = ReadToken(path);
    if (!token.ok()) return usage(std::string(token.status().message()));
    client.token = *token;
  }
  // gRPC's default 4 MiB would refuse an exported session state of a large
  // model (the server bounds what it sends with --max_message_bytes).
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(static_cast<int>(kMaxStateBytes + (1 << 20)));
  client.stub = v1::Generation::NewStub(
      grpc::CreateCustomChannel(absl::GetFlag(FLAGS_server), *credentials, channel_args));
  client.timeout = absl::GetFlag(FLAGS_timeout);
  client.json = absl::GetFlag(FLAGS_json);

  if (command == "list") {
    if (!words.empty()) return usage("list takes no arguments");
    return RunList(client);
  }
  if (command == "info") {
    if (words.size() > 1) return usage("info takes one MODEL");
    return RunInfo(client, words.empty() ? std::string() : words[0]);
  }
  if (command == "generate") return RunGenerate(client, words, line->stop);
  if (command == "embed") return RunEmbed(client, words);
  if (command == "cancel") {
    if (words.size() != 1) return usage("cancel takes one REQUEST_ID");
    return RunCancel(client, words[0]);
  }
  if (session_command) {
    if (!words.empty()) {
      return usage(absl::StrCat(command, " takes no arguments (name the session with --session)"));
    }
    if (session.empty()) return usage(absl::StrCat(command, " needs --session=ID"));
    if (command == "export") {
      const std::string out = absl::GetFlag(FLAGS_out);
      if (out.empty()) return usage("export needs --out=FILE (- for stdout)");
      if (out == "-" && client.json) {
        return usage("export --json prints the state's description on stdout: give --out=FILE");
      }
      if (out == "-" && isatty(STDOUT_FILENO)) {
        return usage(
            "export: not writing binary state to a terminal: redirect stdout or give "
            "--out=FILE");
      }
      return RunExport(client, session, out);
    }
    if (command == "import") {
      const std::string in = absl::GetFlag(FLAGS_in);
      if (in.empty()) return usage("import needs --in=FILE (- for stdin)");
      if (in == "-" && isatty(STDIN_FILENO)) {
        return usage("import: stdin is a terminal: redirect it from a file or give --in=FILE");
      }
      return RunImport(client, session, in);
    }
    return RunDelete(client, session);
  }
  return usage(absl::StrCat("unknown command \"", command, "\""));
}

}  // namespace
}  // namespace performer::client

int main(int argc, char** argv) {
  // Before any thread exists, so that every thread gRPC starts inherits the
  // mask and SIGINT reaches only InterruptWatcher (see there).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, performer::client::InterruptWatcher::kWakeSignal);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return performer::client::Main(argc, argv);
}
