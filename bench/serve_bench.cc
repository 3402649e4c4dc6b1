// serve_bench: the serving load generator. Measures, in one run on one
// machine, what a client of performer-serve gets over loopback gRPC and what
// the engine does without gRPC, on the same model and workload:
//
//   for each concurrency C (--concurrency, default 1,8,32,64):
//     gRPC: C client streams, each running --requests_per_stream streaming
//       GenerateStream requests back to back (prompt of --prompt_tokens ids,
//       --max_new_tokens new tokens, greedy, ignore_eos), against the real
//       performer-serve binary started as a child process (what users run);
//       per token its arrival time: tokens/s (all generated tokens / wall
//       time), time to first token p50/p99, inter-token latency p50/p99;
//     engine, right after (machine drift then hits both sides of a ratio
//       alike): the same requests submitted straight to the model's Engine
//       (ModelRepository::Load of the same folder, RequestStream sinks, no
//       gRPC), tokens/s and TTFT the same way;
//     decoder: the model's own PerformerDecoder alone (argmax fed back,
//       nothing else), the rates serving is measured against (goal: server
//       tokens/s >= 90% of them at 1 stream, >= 80% at 32): its batched step
//       over C sequences, and the same workload (each round C prompts
//       prefilled as one batch, then their tokens by batched steps).
//   Then the serving targets' ratios: server tokens/s at 32 streams / at
//   1 stream (goal >= 6x) and server tokens/s / engine tokens/s at the same C
//   (goal >= 90%), as a markdown report with the machine facts.
//
// Usage:
//   serve_bench [--model_dir=DIR] [--server_binary=PATH] [--concurrency=1,8,32,64]
//               [--requests_per_stream=2] [--max_new_tokens=128] [--prompt_tokens=16]
//               [--repeats=1] [--client_cpus=0]
//               [--server_flags=--metrics_port=-1,--log_level=off]
// A --weight_dtype among --server_flags applies to the engine and the decoder
// measured beside the server too, and a --stream_interval to the engine's
// streams.
//   serve_bench --make_bench_model=DIR   writes the bench model folder and exits
// Without --model_dir the bench model (decode_bench's shape: vocab 256, dim
// 512, depth 6, heads 8, dim_head 64, nb_features 256, causal; random
// weights, speed does not depend on them; token ids only) is written to a
// temporary folder first. --server=HOST:PORT measures a server that is
// already running instead of starting one (requests go to its default
// model; the engine part loads --model_dir, which should be that model).
//
// The gRPC streams are driven by --client_threads threads through completion
// queues (RunGrpcLoad), so that the client's cost per message stays small;
// the report gives each side's CPU use during the gRPC runs, which shows
// whether the load generator was the limit, and for a server it started the
// CPU time of its compute thread against the rest of the process (the
// message path: gRPC's and the write threads). The server / engine ratio is
// the median of each repeat's ratio (the two sides run back to back). By default the client threads
// share the CPUs with the server: on a small machine their CPU time
// (protobuf decoding) is part of what the ratios show. --client_cpus=N gives the client threads the
// last N CPUs and everything measured (the server process with all its threads, the in-process
// engine, the decoder) the others, as when clients run on other machines; --threads then defaults
// to the measured side's CPUs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/decoding/performer_decoder.h"
#include "core/decoding/sequence_decoder.h"
#include "core/generation/sampling_params.h"
#include "core/io/safetensors.h"
#include "core/io/state_dict.h"
#include "core/models/decode_step_options.h"
#include "core/models/model_folder.h"
#include "core/models/performer_lm.h"
#include "core/runtime/torch_runtime.h"
#include "performer/v1/generation.grpc.pb.h"
#include "server/engine/compute_thread.h"
#include "server/engine/engine.h"
#include "server/engine/generation_request.h"
#include "server/engine/request_stream.h"
#include "server/engine/state_reuse_options.h"
#include "server/repository/model_repository.h"
#include "tests/testing/remove_tree.h"

ABSL_FLAG(std::string, model_dir, "",
          "Model folder to serve (config.json + weights.safetensors); empty = write the bench "
          "model to a temporary folder.");
ABSL_FLAG(std::string, make_bench_model, "", "Write the bench model folder here and exit.");
ABSL_FLAG(std::string, server_binary, "",
          "performer-serve binary; empty = ../server/performer-serve next to this program.");
ABSL_FLAG(std::string, server, "",
          "HOST:PORT of a running server to measure instead of starting one.");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"1", "8", "32", "64"}),
          "Concurrent streams, one measurement each.");
ABSL_FLAG(int32_t, requests_per_stream, 2, "Requests each stream runs back to back.");
ABSL_FLAG(int32_t, max_new_tokens, 128, "New tokens per request (ignore_eos: always this many).");
ABSL_FLAG(int32_t, prompt_tokens, 16, "Prompt length in tokens.");
ABSL_FLAG(std::string, device, "cpu",
          "Where the model runs, for the server (--device), the in-process engine and the "
          "decoder alike: cpu, or cuda[:N] with a CUDA LibTorch.");
ABSL_FLAG(int32_t, threads, 0,
          "LibTorch intra-op threads, for the server and the in-process engine alike; 0 = every "
          "core.");
ABSL_FLAG(int32_t, repeats, 1,
          "Runs of each measurement per concurrency, the three sides alternating; each side "
          "reports its median run (on a noisy machine, 5 or more).");
ABSL_FLAG(int32_t, client_cpus, 0,
          "Run the client threads on the last N CPUs of this process's set and the server, the "
          "in-process engine and the decoder on the others (clients as if on other machines); 0 = "
          "all share every CPU.");
ABSL_FLAG(int32_t, client_threads, 0,
          "Threads that drive the gRPC streams (each its share of the streams through its own "
          "completion queue); 0 = one per client CPU with --client_cpus, else one.");
ABSL_FLAG(bool, shared_channel, false,
          "All streams on one gRPC channel (one HTTP/2 connection) instead of one each.");
ABSL_FLAG(bool, engine, true, "Also measure the engine in-process.");
ABSL_FLAG(bool, http, false,
          "Also stream the same requests over the server's HTTP port (OpenAI completions with "
          "Server-Sent Events, one keep-alive connection per stream), beside gRPC.");
ABSL_FLAG(bool, decoder, true,
          "Also measure the decoder's own batched step rate at each concurrency (the same "
          "model, no engine): the baseline of the serving-cost goals.");
ABSL_FLAG(std::vector<std::string>, server_flags, {},
          "Extra flags for the started server, comma-separated (e.g. "
          "--metrics_port=-1,--log_level=off to measure without metrics and request logs).");
ABSL_FLAG(absl::Duration, request_timeout, absl::Minutes(2), "Deadline of each request.");
ABSL_FLAG(absl::Duration, server_start_timeout, absl::Minutes(3),
          "How long the server may take to load and warm up.");
// The bench model's shape (used without --model_dir and by --make_bench_model).
ABSL_FLAG(int64_t, bench_vocab, 256, "Bench model: vocabulary (256 = the byte tokenizer's).");
ABSL_FLAG(int64_t, bench_dim, 512, "Bench model: dim.");
ABSL_FLAG(int64_t, bench_depth, 6, "Bench model: layers.");
ABSL_FLAG(int64_t, bench_heads, 8, "Bench model: heads.");
ABSL_FLAG(int64_t, bench_dim_head, 64, "Bench model: dim_head.");
ABSL_FLAG(int64_t, bench_nb_features, 256, "Bench model: random features per head.");
ABSL_FLAG(int64_t, bench_max_seq_len, 2048, "Bench model: max_seq_len.");
ABSL_FLAG(bool, bench_tokenizer, false,
          "Bench model: add the byte tokenizer (vocab 256), so that responses carry text too.");

namespace performer {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::performer::v1;
using Clock = std::chrono::steady_clock;

double SecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Which CPUs the measured side (server, engine, decoder) and the client
// threads run on. Threads inherit their creator's CPU set, and so does the
// server child: the main thread pins itself to a side before it creates that
// side's threads.
class CpuPlacement {
 public:
  // Splits this process's CPU set: the last `client_cpus` CPUs for the
  // clients. 0 = no split (every pin is a no-op).
  static absl::StatusOr<CpuPlacement> Split(int client_cpus) {
    CpuPlacement placement;
    if (client_cpus == 0) return placement;
    cpu_set_t all;
    CPU_ZERO(&all);
    if (sched_getaffinity(0, sizeof(all), &all) != 0) {
      return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
    }
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &all)) cpus.push_back(cpu);
    }
    if (client_cpus < 0 || client_cpus >= static_cast<int>(cpus.size())) {
      return absl::InvalidArgumentError(absl::StrCat("--client_cpus=", client_cpus,
                                                     " must leave at least one of the ",
                                                     cpus.size(), " CPUs to the server"));
    }
    placement.split_ = true;
    CPU_ZERO(&placement.server_);
    CPU_ZERO(&placement.client_);
    const size_t server_count = cpus.size() - static_cast<size_t>(client_cpus);
    std::vector<int> server_cpus(cpus.begin(), cpus.begin() + server_count);
    std::vector<int> client(cpus.begin() + server_count, cpus.end());
    for (int cpu : server_cpus) CPU_SET(cpu, &placement.server_);
    for (int cpu : client) CPU_SET(cpu, &placement.client_);
    placement.text_ =
        absl::StrCat("server, engine and decoder on CPUs ", absl::StrJoin(server_cpus, ","),
                     "; clients on CPUs ", absl::StrJoin(client, ","));
    return placement;
  }

  bool split() const { return split_; }
  int server_cpus() const { return CPU_COUNT(&server_); }
  int client_cpus() const { return CPU_COUNT(&client_); }
  // The CPUs of each side (every CPU of the process's set when not split).
  std::vector<int> ServerCpus() const { return Cpus(server_); }
  std::vector<int> ClientCpus() const { return Cpus(client_); }
  const std::string& text() const { return text_; }

  // Pins the calling thread (and so the threads and processes it creates).
  absl::Status PinToServer() const { return Pin(server_); }
  absl::Status PinToClients() const { return Pin(client_); }

 private:
  std::vector<int> Cpus(const cpu_set_t& set) const {
    cpu_set_t all;
    CPU_ZERO(&all);
    if (!split_ && sched_getaffinity(0, sizeof(all), &all) != 0) return {};
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, split_ ? &set : &all)) cpus.push_back(cpu);
    }
    return cpus;
  }

  absl::Status Pin(const cpu_set_t& set) const {
    if (!split_) return absl::OkStatus();
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
      return absl::InternalError(absl::StrCat("sched_setaffinity: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  bool split_ = false;
  cpu_set_t server_{};
  cpu_set_t client_{};
  std::string text_ = "clients and server share every CPU";
};

// True when a pin succeeded; otherwise says why on stderr.
bool Pinned(const absl::Status& pin) {
  if (!pin.ok()) std::fprintf(stderr, "serve_bench: %s\n", pin.ToString().c_str());
  return pin.ok();
}

// How busy a set of CPUs was between two readings of /proc/stat: the share
// of their time not idle (nor waiting for I/O). Shows which side of a run
// was the limit: a client side near 100% means the load generator was.
class CpuBusyMeter {
 public:
  explicit CpuBusyMeter(std::vector<int> cpus) : cpus_(std::move(cpus)), start_(Read()) {}
  // Percent busy since construction; -1 when /proc/stat could not be read.
  double Percent() const {
    const Ticks end = Read();
    if (!start_.valid || !end.valid || end.total <= start_.total) return -1;
    return 100.0 * static_cast<double>(end.busy - start_.busy) /
           static_cast<double>(end.total - start_.total);
  }

 private:
  struct Ticks {
    bool valid = false;
    uint64_t busy = 0;
    uint64_t total = 0;
  };
  Ticks Read() const {
    Ticks ticks;
    std::ifstream stat("/proc/stat");
    std::string line;
    while (std::getline(stat, line)) {
      int cpu = -1;
      if (line.rfind("cpu", 0) != 0 ||
          !absl::SimpleAtoi(line.substr(3, line.find(' ') - 3), &cpu) ||
          std::find(cpus_.begin(), cpus_.end(), cpu) == cpus_.end()) {
        continue;
      }
      std::istringstream fields(line.substr(line.find(' ')));
      uint64_t value = 0;
      for (int i = 0; i < 8 && fields >> value; ++i) {
        ticks.total += value;
        if (i != 3 && i != 4) ticks.busy += value;  // idle, iowait
      }
      ticks.valid = true;
    }
    return ticks;
  }

  std::vector<int> cpus_;
  Ticks start_;
};

// The CPU time a process spent since construction, split between its
// engine's compute thread (kComputeThreadName) and the rest of it (gRPC's
// threads, the write threads, the exposer: the message path), from
// /proc/PID/stat and /proc/PID/task/*/stat. The process's own figure
// includes threads that have ended, so the rest is the process's less the
// compute thread's. Zeros where /proc cannot be read (no pid: an external
// server).
class ThreadCpuMeter {
 public:
  struct Seconds {
    double compute = 0;
    double other = 0;
  };

  explicit ThreadCpuMeter(pid_t pid) : pid_(pid), start_(Read()) {}

  Seconds Elapsed() const {
    const Seconds end = Read();
    return {end.compute - start_.compute, end.other - start_.other};
  }

 private:
  // utime + stime of a /proc stat file, in seconds, and its thread's name.
  static std::optional<std::pair<std::string, double>> StatSeconds(const fs::path& path) {
    std::ifstream file(path);
    std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    const size_t open = text.find('('), close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) {
      return std::nullopt;
    }
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    // After the name: state is field 3; utime and stime are fields 14, 15.
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14 && !absl::SimpleAtoi(field, &utime)) return std::nullopt;
      if (i == 15 && !absl::SimpleAtoi(field, &stime)) return std::nullopt;
    }
    const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
    return std::make_pair(text.substr(open + 1, close - open - 1),
                          static_cast<double>(utime + stime) * tick);
  }

  Seconds Read() const {
    Seconds seconds;
    if (pid_ <= 0) return seconds;
    const fs::path proc = fs::path("/proc") / std::to_string(pid_);
    const auto process = StatSeconds(proc / "stat");
    if (!process) return seconds;
    std::error_code error;
    for (const auto& task : fs::directory_iterator(proc / "task", error)) {
      const auto thread = StatSeconds(task.path() / "stat");
      if (thread && thread->first == server::kComputeThreadName) seconds.compute += thread->second;
    }
    seconds.other = process->second - seconds.compute;
    return seconds;
  }

  pid_t pid_;
  Seconds start_;
};

// ---------------------------------------------------------------------------
// The bench model folder
// ---------------------------------------------------------------------------

// Writes config.json (the keys that differ from the reference's defaults;
// the loader fills in the rest), weights.safetensors (random parameters; the
// buffers, i.e. projection matrices and rotary tables, as constructed) and,
// with --bench_tokenizer, tokenizer.json (byte tokenizer); then loads the
// folder back so that a bad folder fails here and not in the server. No
// tokenizer by default: a random model emits arbitrary bytes, and the
// throughput numbers do not depend on text.
absl::Status WriteBenchModel(const std::string& dir) {
  nlohmann::json config = {
      {"model_class", "PerformerLM"},
      {"num_tokens", absl::GetFlag(FLAGS_bench_vocab)},
      {"max_seq_len", absl::GetFlag(FLAGS_bench_max_seq_len)},
      {"dim", absl::GetFlag(FLAGS_bench_dim)},
      {"depth", absl::GetFlag(FLAGS_bench_depth)},
      {"heads", absl::GetFlag(FLAGS_bench_heads)},
      {"dim_head", absl::GetFlag(FLAGS_bench_dim_head)},
      {"nb_features", absl::GetFlag(FLAGS_bench_nb_features)},
      {"causal", true},
  };
  absl::StatusOr<models::PerformerLMConfig> parsed = models::ParsePerformerLMConfig(config);
  if (!parsed.ok()) return parsed.status();
  if (absl::Status s = models::ValidateConfig(*parsed); !s.ok()) return s;

  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  models::PerformerLM lm(*parsed);
  for (auto& p : lm->named_parameters()) p.value().normal_(0.0, 0.02);
  if (absl::Status s =
          io::SaveSafetensors((fs::path(dir) / "weights.safetensors").string(), io::StateDict(*lm));
      !s.ok()) {
    return s;
  }
  std::ofstream((fs::path(dir) / "config.json").string()) << config.dump(2) << "\n";
  if (absl::GetFlag(FLAGS_bench_tokenizer)) {
    if (parsed->num_tokens != 256) {
      return absl::InvalidArgumentError("--bench_tokenizer needs --bench_vocab=256");
    }
    std::ofstream((fs::path(dir) / "tokenizer.json").string()) << R"({"type": "byte"})"
                                                               << "\n";
  }
  return models::LoadModelFolder(dir).status();
}

// ---------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------

struct RequestTrace;

// What one load run observed.
struct LoadResult {
  int64_t concurrency = 0;
  int64_t requests = 0;
  int64_t tokens = 0;
  int64_t messages = 0;  // token-carrying messages (chunks taken, in-process)
  double wall_seconds = 0;
  std::vector<double> ttft;  // seconds, one per request
  // Seconds between consecutive tokens of a request; tokens that arrive in
  // the same message count a 0 gap (that is what the reader sees).
  std::vector<double> itl;
  int64_t errors = 0;
  std::string first_error;
  // Percent busy over the run (CpuBusyMeter), gRPC runs only; -1 = unknown.
  double server_cpu_busy = -1;
  double client_cpu_busy = -1;
  // CPU seconds of a started server's threads over the run (ThreadCpuMeter),
  // gRPC runs only; both 0 = unknown.
  double server_compute_cpu_seconds = 0;
  double server_other_cpu_seconds = 0;

  double tokens_per_second() const { return wall_seconds > 0 ? tokens / wall_seconds : 0; }

  // Merges one request's trace and status; a request that ended well with
  // another number of tokens than `expected_tokens` counts as an error.
  void Add(const RequestTrace& trace, absl::Status status, int64_t expected_tokens);
};

// What one request observed (merged into LoadResult by the runner).
struct RequestTrace {
  std::optional<double> ttft;
  std::vector<double> itl;
  int64_t tokens = 0;
  int64_t messages = 0;
  std::optional<Clock::time_point> last_arrival;

  void Arrived(Clock::time_point start, Clock::time_point now, int64_t n) {
    if (n <= 0) return;
    ++messages;
    if (!ttft) {
      ttft = SecondsBetween(start, now);
    } else {
      itl.push_back(SecondsBetween(*last_arrival, now));
    }
    for (int64_t i = 1; i < n; ++i) itl.push_back(0.0);
    tokens += n;
    last_arrival = now;
  }
};

void LoadResult::Add(const RequestTrace& trace, absl::Status status, int64_t expected_tokens) {
  ++requests;
  tokens += trace.tokens;
  messages += trace.messages;
  if (trace.ttft) ttft.push_back(*trace.ttft);
  itl.insert(itl.end(), trace.itl.begin(), trace.itl.end());
  if (status.ok() && trace.tokens != expected_tokens) {
    status = absl::InternalError(
        absl::StrCat("got ", trace.tokens, " tokens instead of ", expected_tokens));
  }
  if (!status.ok() && errors++ == 0) first_error = status.ToString();
}

// Runs body(i) for i in [0, count) on threads of their own, released
// together; returns the seconds from the release to the last one's end.
template <typename Body>
double RunReleased(int64_t count, Body body) {
  std::mutex mu;
  std::condition_variable go;
  bool started = false;
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        go.wait(lock, [&] { return started; });
      }
      body(i);
    });
  }
  const Clock::time_point start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    started = true;
  }
  go.notify_all();
  for (std::thread& t : threads) t.join();
  return SecondsBetween(start, Clock::now());
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least p of the samples at or
  // below it (so p99 of a few samples is their maximum).
  const size_t rank = static_cast<size_t>(std::ceil(p * v.size()));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// The prompt of stream s, request r: deterministic and different per
// request, so that no two rows of a batch are the same sequence and no
// request of a run finds another's prompt in the server's prefix cache.
std::vector<int32_t> Prompt(int64_t s, int64_t r, int64_t length, int64_t vocab) {
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(s * 1000003 + r + 1);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < length; ++i) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    ids.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(vocab)));
  }
  return ids;
}

struct Workload {
  int64_t requests_per_stream = 2;
  int64_t max_new_tokens = 128;
  int64_t prompt_tokens = 16;
  int64_t vocab = 256;
  absl::Duration request_timeout = absl::Minutes(2);
  // Added to each request's index r in its prompt: every measurement of a
  // run (each concurrency, each repeat) asks for prompts of its own.
  int64_t first_request = 0;
};

// Runs `concurrency` threads, each calling request(stream, r, trace) for
// every r, released together; merges their traces.
template <typename RequestFn>
LoadResult RunLoad(int64_t concurrency, const Workload& workload, RequestFn request) {
  LoadResult result;
  result.concurrency = concurrency;
  std::mutex mu;
  result.wall_seconds = RunReleased(concurrency, [&](int64_t s) {
    for (int64_t r = 0; r < workload.requests_per_stream; ++r) {
      RequestTrace trace;
      const absl::Status status = request(s, r, trace);
      std::lock_guard<std::mutex> lock(mu);
      result.Add(trace, status, workload.max_new_tokens);
    }
  });
  return result;
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// Streams over gRPC from `client_threads` threads, each driving its share of
// the streams (stream s on thread s % client_threads) through its own
// completion queue: the client's cost per message is a completion, not a
// thread wake-up, so that the load generator is not what limits hundreds of
// streams. Each stream runs its requests back to back; stubs[s] is stream
// s's channel.
LoadResult RunGrpcLoad(int64_t concurrency, const Workload& workload,
                       const std::vector<v1::Generation::Stub*>& stubs, int client_threads) {
  // One request; its address is the tag of its steps.
  struct Call {
    enum class Step { kStart, kRead, kFinish, kDone };
    int64_t stream = 0;
    int64_t request = 0;
    grpc::ClientContext context;
    v1::GenerateRequest wire;
    v1::GenerateResponse response;
    std::unique_ptr<grpc::ClientAsyncReader<v1::GenerateResponse>> reader;
    grpc::Status status;
    Step step = Step::kStart;
    Clock::time_point start;
    RequestTrace trace;
    bool got_last = false;
    // A stream that ends without its last message (a message that could not
    // be parsed) stays open until its deadline; the alarm cancels it 2 s
    // after its reads ended.
    grpc::Alarm watchdog;  // tag: this object's address + 1
    bool watchdog_set = false;
  };
  LoadResult result;
  result.concurrency = concurrency;
  std::mutex mu;  // result
  auto record = [&](Call& call) {
    const absl::Status status =
        call.got_last || !call.status.ok()
            ? FromGrpc(call.status)
            : absl::InternalError(
                  "the stream broke off before its last message (a response that could not be "
                  "parsed, e.g. text that is not valid UTF-8?)");
    std::lock_guard<std::mutex> lock(mu);
    result.Add(call.trace, status, workload.max_new_tokens);
  };
  const int threads_count =
      static_cast<int>(std::clamp<int64_t>(client_threads, 1, std::max<int64_t>(1, concurrency)));
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  for (int t = 0; t < threads_count; ++t) {
    queues.push_back(std::make_unique<grpc::CompletionQueue>());
  }
  // Starts request r of stream s on `cq`.
  auto start = [&](int64_t s, int64_t r, grpc::CompletionQueue& cq) {
    auto call = std::make_unique<Call>();
    call->stream = s;
    call->request = r;
    const std::vector<int32_t> prompt =
        Prompt(s, workload.first_request + r, workload.prompt_tokens, workload.vocab);
    call->wire.mutable_prompt_tokens()->mutable_ids()->Assign(prompt.begin(), prompt.end());
    call->wire.set_max_new_tokens(static_cast<int32_t>(workload.max_new_tokens));
    call->wire.set_temperature(0.0f);
    call->wire.set_ignore_eos(true);
    call->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoNanoseconds(workload.request_timeout));
    call->start = Clock::now();
    call->reader =
        stubs[static_cast<size_t>(s)]->PrepareAsyncGenerateStream(&call->context, call->wire, &cq);
    Call* raw = call.release();
    raw->reader->StartCall(raw);
  };
  result.wall_seconds = RunReleased(threads_count, [&](int64_t t) {
    grpc::CompletionQueue& cq = *queues[static_cast<size_t>(t)];
    int64_t live = 0;
    for (int64_t s = t; s < concurrency; s += threads_count) {
      start(s, 0, cq);
      ++live;
    }
    // Finished calls whose cancelled alarm has not come back yet.
    int64_t alarms = 0;
    void* tag = nullptr;
    bool ok = false;
    while ((live > 0 || alarms > 0) && cq.Next(&tag, &ok)) {
      const auto bits = reinterpret_cast<uintptr_t>(tag);
      Call* call = reinterpret_cast<Call*>(bits & ~uintptr_t{1});
      if ((bits & 1) != 0) {  // the watchdog
        call->watchdog_set = false;
        if (call->step == Call::Step::kDone) {
          delete call;
          --alarms;
        } else if (ok) {
          call->context.TryCancel();  // Finish then comes back
        }
        continue;
      }
      switch (call->step) {
        case Call::Step::kStart:
          call->step = ok ? Call::Step::kRead : Call::Step::kFinish;
          if (ok) {
            call->reader->Read(&call->response, call);
          } else {
            call->reader->Finish(&call->status, call);
          }
          break;
        case Call::Step::kRead:
          if (ok) {
            call->trace.Arrived(call->start, Clock::now(), call->response.token_ids_size());
            call->got_last = call->response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
            call->reader->Read(&call->response, call);
            break;
          }
          call->step = Call::Step::kFinish;
          if (!call->got_last) {
            call->watchdog.Set(&cq, std::chrono::system_clock::now() + std::chrono::seconds(2),
                               reinterpret_cast<void*>(bits | 1));
            call->watchdog_set = true;
          }
          call->reader->Finish(&call->status, call);
          break;
        case Call::Step::kFinish: {
          record(*call);
          const int64_t s = call->stream;
          const int64_t next = call->request + 1;
          if (call->watchdog_set) {
            call->step = Call::Step::kDone;
            call->watchdog.Cancel();
            ++alarms;
          } else {
            delete call;
          }
          --live;
          if (next < workload.requests_per_stream) {
            start(s, next, cq);
            ++live;
          }
          break;
        }
        case Call::Step::kDone:
          break;
      }
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  });
  return result;
}

// One keep-alive HTTP/1.1 connection to the server's OpenAI API, read with
// plain sockets so that the client's own cost stays small and visible.
class SseConnection {
 public:
  explicit SseConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~SseConnection() {
    if (fd_ >= 0) close(fd_);
  }
  SseConnection(const SseConnection&) = delete;
  SseConnection& operator=(const SseConnection&) = delete;

  // POSTs `body` to `path` and calls on_event(data) for each "data: " event
  // of the streamed answer, until the last chunk.
  template <typename OnEvent>
  absl::Status Stream(const std::string& path, const std::string& body, OnEvent on_event) {
    if (fd_ < 0) return absl::UnavailableError("not connected");
    const std::string request = absl::StrCat(
        "POST ", path, " HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n",
        "Content-Length: ", body.size(), "\r\n\r\n", body);
    if (send(fd_, request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size())) {
      return absl::UnavailableError("send failed");
    }
    size_t header_end = std::string::npos;
    while ((header_end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return absl::UnavailableError("the connection closed before the headers");
    }
    const std::string head = in_.substr(0, header_end);
    in_.erase(0, header_end + 4);
    if (head.rfind("HTTP/1.1 200", 0) != 0) {
      return absl::InternalError(absl::StrCat("answer: ", head.substr(0, head.find('\r'))));
    }
    std::string events;
    for (;;) {
      size_t line_end;
      while ((line_end = in_.find("\r\n")) == std::string::npos) {
        if (!Fill()) return absl::UnavailableError("the connection closed mid-stream");
      }
      const size_t size = std::stoul(in_.substr(0, line_end), nullptr, 16);
      while (in_.size() < line_end + 2 + size + 2) {
        if (!Fill()) return absl::UnavailableError("the connection closed mid-chunk");
      }
      events.append(in_, line_end + 2, size);
      in_.erase(0, line_end + 2 + size + 2);
      size_t event_end;
      while ((event_end = events.find("\n\n")) != std::string::npos) {
        if (events.compare(0, 6, "data: ") == 0) on_event(events.substr(6, event_end - 6));
        events.erase(0, event_end + 2);
      }
      if (size == 0) return absl::OkStatus();
    }
  }

 private:
  bool Fill() {
    char buffer[16384];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) return false;
    in_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string in_;
};

// One streaming completion over HTTP: the same request as RunGrpcLoad's
// (token ids, greedy, ignore_eos). The events carry text, not token ids:
// each event counts as one arrival, and the request's tokens are the usage
// chunk's completion_tokens.
absl::Status HttpStreamOne(SseConnection& connection, const std::string& model,
                           const Workload& workload, int64_t s, int64_t r, RequestTrace& trace) {
  // Prompts of their own: gRPC's, run just before, must not be found in the
  // prefix cache.
  const std::vector<int32_t> prompt =
      Prompt(s + 1000000, workload.first_request + r, workload.prompt_tokens, workload.vocab);
  const nlohmann::json body = {{"model", model},
                               {"prompt", prompt},
                               {"max_tokens", workload.max_new_tokens},
                               {"temperature", 0},
                               {"ignore_eos", true},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}}};
  const Clock::time_point start = Clock::now();
  int64_t completion_tokens = -1;
  absl::Status status =
      connection.Stream("/v1/completions", body.dump(), [&](const std::string& data) {
        if (data == "[DONE]") return;
        const Clock::time_point now = Clock::now();
        const nlohmann::json chunk = nlohmann::json::parse(data, nullptr, false);
        if (chunk.is_discarded()) return;
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
          completion_tokens = chunk["usage"].value("completion_tokens", int64_t{-1});
        } else if (chunk.contains("choices") && !chunk["choices"].empty() &&
                   chunk["choices"][0]["finish_reason"].is_null()) {
          trace.Arrived(start, now, 1);
        }
      });
  if (!status.ok()) return status;
  if (completion_tokens < 0) return absl::InternalError("no usage chunk");
  trace.tokens = completion_tokens;
  return absl::OkStatus();
}

// The --stream_interval among --server_flags (1 when none): the in-process
// engine's streams hand their tokens over in as many at a time, so that the
// two sides deliver alike and their ratio is what gRPC costs.
// The value of --`name` in --server_flags (the last one given), if any.
std::optional<std::string> ServerFlag(std::string_view name) {
  std::optional<std::string> value;
  const std::string prefix = "--" + std::string(name) + "=";
  for (const std::string& flag : absl::GetFlag(FLAGS_server_flags)) {
    if (absl::StartsWith(flag, prefix)) value = flag.substr(prefix.size());
  }
  return value;
}

// An integer server flag's value, or `fallback` (the server's default) when
// it is absent or not an integer of at least `min`.
int64_t ServedInteger(std::string_view name, int64_t fallback, int64_t min) {
  int64_t parsed = 0;
  const std::optional<std::string> value = ServerFlag(name);
  return value.has_value() && absl::SimpleAtoi(*value, &parsed) && parsed >= min ? parsed
                                                                                 : fallback;
}

int64_t ServedStreamInterval() { return ServedInteger("stream_interval", 1, 1); }

// One request straight to the engine. The wake-up state is shared with the
// listener, which the engine thread may still be running when this returns.
absl::Status EngineOne(server::Engine& engine, const Workload& workload, int64_t concurrency,
                       int64_t s, int64_t r, RequestTrace& trace) {
  struct Wakeup {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
  };
  auto wakeup = std::make_shared<Wakeup>();
  auto stream = std::make_shared<server::RequestStream>(
      /*max_buffered_tokens=*/0, /*notify_every_tokens=*/ServedStreamInterval());
  stream->SetListener([wakeup] {
    {
      std::lock_guard<std::mutex> lock(wakeup->mu);
      wakeup->ready = true;
    }
    wakeup->cv.notify_one();
  });
  server::GenerationRequest request;
  request.request_id = absl::StrCat("serve-bench-", concurrency, "-", s, "-", r);
  const std::vector<int32_t> prompt =
      Prompt(s, workload.first_request + r, workload.prompt_tokens, workload.vocab);
  request.prompt.assign(prompt.begin(), prompt.end());
  request.sampling = generation::SamplingParams::Greedy();
  request.sampling.max_new_tokens = workload.max_new_tokens;
  request.deadline = absl::Now() + workload.request_timeout;
  const Clock::time_point start = Clock::now();
  if (absl::Status submitted = engine.Submit(std::move(request), stream); !submitted.ok()) {
    return submitted;
  }
  while (true) {
    {
      std::unique_lock<std::mutex> lock(wakeup->mu);
      wakeup->cv.wait(lock, [&] { return wakeup->ready; });
      wakeup->ready = false;
    }
    server::RequestStream::Taken taken = stream->Take();
    trace.Arrived(start, Clock::now(), static_cast<int64_t>(taken.chunk.token_ids.size()));
    if (taken.summary) return taken.summary->status;
  }
}

// ---------------------------------------------------------------------------
// The server child process
// ---------------------------------------------------------------------------

class ServerProcess {
 public:
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Starts `binary` with `args` (stdout and stderr to `log_path`) and waits
  // for the port it writes to `port_file` once its models are loaded.
  absl::Status Start(const std::string& binary, const std::vector<std::string>& args,
                     const std::string& port_file, const std::string& log_path,
                     absl::Duration timeout) {
    log_path_ = log_path;
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // posix_spawn rather than fork: this process already runs LibTorch's and
    // gRPC's threads, and a forked child may only call async-signal-safe
    // functions before exec.
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot start ", binary, ": ", std::strerror(rc)));
    }
    pid_ = pid;
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::FailedPreconditionError(absl::StrCat(binary, " exited (status ", status,
                                                          ") before it was ready:\n", LogTail()));
      }
      std::ifstream in(port_file);
      if (in >> port_ && port_ > 0) return absl::OkStatus();
      absl::SleepFor(absl::Milliseconds(100));
    }
    return absl::DeadlineExceededError(absl::StrCat(binary, " wrote no port to ", port_file, " in ",
                                                    absl::FormatDuration(timeout), ":\n",
                                                    LogTail()));
  }

  // SIGTERM (the server drains), then its exit status.
  absl::StatusOr<int> Stop(absl::Duration timeout) {
    if (pid_ <= 0) return absl::FailedPreconditionError("not running");
    kill(pid_, SIGTERM);
    const absl::Time until = absl::Now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (absl::Now() > until) {
        return absl::DeadlineExceededError(absl::StrCat("no exit ", absl::FormatDuration(timeout),
                                                        " after SIGTERM:\n", LogTail()));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    pid_ = -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return absl::InternalError(
        absl::StrCat("killed by signal ", WTERMSIG(status), ":\n", LogTail()));
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }  // -1 when not running

  std::string LogTail() const {
    std::ifstream in(log_path_);
    std::stringstream all;
    all << in.rdbuf();
    const std::string text = all.str();
    return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

std::string DefaultServerBinary() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) return "performer-serve";
  return (self.parent_path().parent_path() / "server" / "performer-serve").string();
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string Mib(int64_t bytes) { return absl::StrFormat("%.2f MiB", bytes / 1048576.0); }

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

// The decoder alone, on the same model and workload as the server: the
// baselines of the serving-cost goals.
struct DecoderRates {
  // Batched steps of all c sequences at once, tokens/s = c * steps / time.
  double step_tokens_per_second = 0;
  // The whole workload (each round: c prompts prefilled, then their new
  // tokens by batched steps), tokens/s = generated tokens / time.
  double workload_tokens_per_second = 0;
};

struct Measured {
  LoadResult grpc;
  std::optional<LoadResult> http;  // --http: the same workload over the HTTP API
  std::optional<LoadResult> engine;
  // The median over the repeats of each repeat's server / engine rate: the
  // two ran back to back, so a change of the machine's speed between
  // repeats (on a shared VM, up to 2x) cancels out of each ratio.
  double paired_engine_ratio = 0;
  // The decoder alone at batch = streams (no engine, no sampling beyond an
  // argmax, no streaming).
  std::optional<DecoderRates> decoder;
};

// The run with the median tokens/s (the upper one of an even count), with
// the errors of every run added, so that none goes unreported.
LoadResult MedianRun(std::vector<LoadResult> runs) {
  int64_t errors = 0;
  std::string first_error;
  for (const LoadResult& r : runs) {
    if (r.errors > 0 && errors == 0) first_error = r.first_error;
    errors += r.errors;
  }
  std::sort(runs.begin(), runs.end(), [](const LoadResult& a, const LoadResult& b) {
    return a.tokens_per_second() < b.tokens_per_second();
  });
  LoadResult median = std::move(runs[runs.size() / 2]);
  median.errors = errors;
  median.first_error = first_error;
  return median;
}

// The median of grpc[i] / engine[i] (the upper one of an even count).
double PairedRatio(const std::vector<LoadResult>& grpc, const std::vector<LoadResult>& engine) {
  std::vector<double> ratios;
  for (size_t i = 0; i < grpc.size() && i < engine.size(); ++i) {
    ratios.push_back(grpc[i].tokens_per_second() / std::max(1e-9, engine[i].tokens_per_second()));
  }
  if (ratios.empty()) return 0;
  std::sort(ratios.begin(), ratios.end());
  return ratios[ratios.size() / 2];
}

// Each rate's median over the runs.
DecoderRates MedianRates(const std::vector<DecoderRates>& runs) {
  auto median = [&runs](double DecoderRates::*rate) {
    std::vector<double> values;
    values.reserve(runs.size());
    for (const DecoderRates& r : runs) values.push_back(r.*rate);
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  DecoderRates rates;
  rates.step_tokens_per_second = median(&DecoderRates::step_tokens_per_second);
  rates.workload_tokens_per_second = median(&DecoderRates::workload_tokens_per_second);
  return rates;
}

absl::StatusOr<DecoderRates> DecoderTokensPerSecondHere(const std::string& model_dir, int64_t c,
                                                        const Workload& workload);

// The --weight_dtype among --server_flags (fp32 when none): the engine and
// the decoder measured beside the server serve the model in it too.
models::WeightDtype ServedWeightDtype() {
  const std::optional<std::string> value = ServerFlag("weight_dtype");
  const std::optional<models::WeightDtype> parsed =
      value.has_value() ? models::ParseWeightDtype(*value) : std::nullopt;
  return parsed.value_or(models::WeightDtype::kFloat32);
}

// On the compute thread, where the engine runs its steps too
// (server/engine/compute_thread.h): one OpenMP team for both.
absl::StatusOr<DecoderRates> DecoderTokensPerSecond(const std::string& model_dir, int64_t c,
                                                    const Workload& workload) {
  return server::RunOnComputeThread(
      [&] { return DecoderTokensPerSecondHere(model_dir, c, workload); });
}

absl::StatusOr<DecoderRates> DecoderTokensPerSecondHere(const std::string& model_dir, int64_t c,
                                                        const Workload& workload) {
  absl::StatusOr<models::LoadedModel> model = models::LoadModelFolder(model_dir);
  if (!model.ok()) return model.status();
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu") model->MoveTo(torch::Device(device));
  decoding::PerformerDecoderOptions options;
  options.step.weight_dtype = ServedWeightDtype();
  absl::StatusOr<std::unique_ptr<decoding::PerformerDecoder>> decoder =
      decoding::PerformerDecoder::Create(*model, c, options);
  if (!decoder.ok()) return decoder.status();
  c10::InferenceMode inference;
  double step_seconds = 0, total_seconds = 0;
  int64_t steps = 0;
  for (int64_t r = 0; r < workload.requests_per_stream; ++r) {
    const Clock::time_point round_start = Clock::now();
    // The round's prompts as one batch (PrefillBatch), the decoder's
    // cheapest way to prefill them.
    std::vector<decoding::SequenceId> ids;
    std::vector<decoding::PrefillItem> items;
    for (int64_t s = 0; s < c; ++s) {
      absl::StatusOr<decoding::SequenceId> id = (*decoder)->Create();
      if (!id.ok()) return id.status();
      const std::vector<int32_t> prompt =
          Prompt(s, workload.first_request + r, workload.prompt_tokens, workload.vocab);
      decoding::PrefillItem& item = items.emplace_back();
      item.id = *id;
      item.request.prompt.assign(prompt.begin(), prompt.end());
      ids.push_back(*id);
    }
    std::vector<int64_t> tokens;
    for (const absl::StatusOr<torch::Tensor>& logits : (*decoder)->PrefillBatch(items)) {
      if (!logits.ok()) return logits.status();
      tokens.push_back(logits->argmax().cpu().item<int64_t>());
    }
    const Clock::time_point steps_start = Clock::now();
    for (int64_t i = 1; i < workload.max_new_tokens; ++i) {
      absl::StatusOr<torch::Tensor> logits = (*decoder)->Step(ids, tokens);
      if (!logits.ok()) return logits.status();
      const torch::Tensor next = logits->argmax(1).cpu().contiguous();
      tokens.assign(next.data_ptr<int64_t>(), next.data_ptr<int64_t>() + c);
      ++steps;
    }
    step_seconds += std::chrono::duration<double>(Clock::now() - steps_start).count();
    for (decoding::SequenceId id : ids) {
      if (absl::Status released = (*decoder)->Release(id); !released.ok()) return released;
    }
    total_seconds += std::chrono::duration<double>(Clock::now() - round_start).count();
  }
  DecoderRates rates;
  rates.step_tokens_per_second = static_cast<double>(c * steps) / std::max(1e-9, step_seconds);
  rates.workload_tokens_per_second =
      static_cast<double>(c * workload.max_new_tokens * workload.requests_per_stream) /
      std::max(1e-9, total_seconds);
  return rates;
}

void PrintErrors(const char* what, const LoadResult& r) {
  if (r.errors == 0) return;
  std::printf("\n**%s, %lld streams: %lld of %lld requests failed**; first: %s\n", what,
              static_cast<long long>(r.concurrency), static_cast<long long>(r.errors),
              static_cast<long long>(r.requests), r.first_error.c_str());
}

// --http: the same server streaming the same requests over HTTP (OpenAI
// completions, SSE) and gRPC, run back to back.
void PrintHttpReport(const std::vector<Measured>& runs) {
  bool any = false;
  for (const Measured& m : runs) any = any || m.http.has_value();
  if (!any) return;
  std::printf(
      "\n## HTTP (OpenAI completions, SSE) vs gRPC on one server\n\n"
      "| streams | gRPC tok/s | HTTP tok/s | HTTP / gRPC | gRPC TTFT p50 ms | HTTP TTFT p50 ms | "
      "HTTP events/request |\n|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Measured& m : runs) {
    if (!m.http) continue;
    const LoadResult& g = m.grpc;
    const LoadResult& h = *m.http;
    std::printf("| %lld | %.0f | %.0f | %.0f%% | %.1f | %.1f | %.1f |\n",
                static_cast<long long>(g.concurrency), g.tokens_per_second(), h.tokens_per_second(),
                100.0 * h.tokens_per_second() / std::max(1e-9, g.tokens_per_second()),
                Percentile(g.ttft, 0.5) * 1e3, Percentile(h.ttft, 0.5) * 1e3,
                h.requests > 0 ? static_cast<double>(h.messages) / h.requests : 0.0);
  }
}

void PrintReport(const std::vector<Measured>& runs) {
  std::printf(
      "\n## Streaming over gRPC vs the engine in-process\n\n"
      "| streams | requests | tokens | server tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | "
      "ITL p99 ms | tokens/msg | engine tok/s | engine TTFT p50 ms | server / engine | "
      "decoder step tok/s | server / decoder step | decoder workload tok/s | "
      "server / decoder workload |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Measured& m : runs) {
    const LoadResult& g = m.grpc;
    std::string engine_cols = "- | - | -";
    if (m.engine) {
      engine_cols =
          absl::StrFormat("%.0f | %.1f | %.0f%%", m.engine->tokens_per_second(),
                          Percentile(m.engine->ttft, 0.5) * 1e3, 100.0 * m.paired_engine_ratio);
    }
    engine_cols +=
        m.decoder
            ? absl::StrFormat(
                  " | %.0f | %.0f%% | %.0f | %.0f%%", m.decoder->step_tokens_per_second,
                  100.0 * g.tokens_per_second() / std::max(1e-9, m.decoder->step_tokens_per_second),
                  m.decoder->workload_tokens_per_second,
                  100.0 * g.tokens_per_second() /
                      std::max(1e-9, m.decoder->workload_tokens_per_second))
            : std::string(" | - | - | - | -");
    std::printf(
        "| %lld | %lld | %lld | %.0f | %.1f | %.1f | %.2f | %.2f | %.2f | %s |\n",
        static_cast<long long>(g.concurrency), static_cast<long long>(g.requests),
        static_cast<long long>(g.tokens), g.tokens_per_second(), Percentile(g.ttft, 0.5) * 1e3,
        Percentile(g.ttft, 0.99) * 1e3, Percentile(g.itl, 0.5) * 1e3, Percentile(g.itl, 0.99) * 1e3,
        g.messages > 0 ? static_cast<double>(g.tokens) / g.messages : 0.0, engine_cols.c_str());
  }
  std::printf(
      "\n## CPU use during the gRPC runs\n\n| streams | measured side's CPUs busy | client "
      "CPUs busy | server compute thread CPU s | server's other threads CPU s | other / "
      "compute | other threads CPU µs / message |\n|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Measured& m : runs) {
    const LoadResult& g = m.grpc;
    std::string threads = "- | - | - | -";
    if (g.server_compute_cpu_seconds > 0) {
      threads = absl::StrFormat(
          "%.2f | %.2f | %.0f%% | %.0f", g.server_compute_cpu_seconds, g.server_other_cpu_seconds,
          100.0 * g.server_other_cpu_seconds / g.server_compute_cpu_seconds,
          g.messages > 0 ? 1e6 * g.server_other_cpu_seconds / static_cast<double>(g.messages)
                         : 0.0);
    }
    std::printf("| %lld | %.0f%% | %.0f%% | %s |\n", static_cast<long long>(g.concurrency),
                g.server_cpu_busy, g.client_cpu_busy, threads.c_str());
  }
  for (const Measured& m : runs) {
    PrintErrors("gRPC", m.grpc);
    if (m.http) PrintErrors("HTTP", *m.http);
    if (m.engine) PrintErrors("engine", *m.engine);
  }
  PrintHttpReport(runs);

  auto find = [&runs](int64_t c) -> const Measured* {
    for (const Measured& m : runs) {
      if (m.grpc.concurrency == c) return &m;
    }
    return nullptr;
  };
  std::printf("\n## Goals\n\n| measure | value | goal | met |\n|---|---:|---:|:---:|\n");
  const Measured* one = find(1);
  const Measured* many = find(32);
  if (one != nullptr && many != nullptr) {
    const double scaling =
        many->grpc.tokens_per_second() / std::max(1e-9, one->grpc.tokens_per_second());
    std::printf("| server tokens/s, 32 streams / 1 stream | %.2fx | >= 6x | %s |\n", scaling,
                scaling >= 6 ? "yes" : "no");
    if (one->engine && many->engine) {
      std::printf(
          "| engine tokens/s, 32 / 1 (in-process, for reference) | %.2fx | | |\n",
          many->engine->tokens_per_second() / std::max(1e-9, one->engine->tokens_per_second()));
    }
  } else {
    std::printf(
        "| server tokens/s, 32 / 1 stream | (needs 1 and 32 in --concurrency) | >= 6x | |\n");
  }
  for (const Measured& m : runs) {
    if (!m.engine) continue;
    // 256 streams and more: the many-streams goal (docs/benchmarks.md, "Many
    // streams"), where every message costs the model's CPU.
    const double goal = m.grpc.concurrency >= 256 ? 0.8 : 0.9;
    const double ratio = m.paired_engine_ratio;
    std::printf("| server / engine tokens/s at %lld streams | %.0f%% | >= %.0f%% | %s |\n",
                static_cast<long long>(m.grpc.concurrency), 100 * ratio, 100 * goal,
                ratio >= goal ? "yes" : "no");
  }
  for (const Measured& m : runs) {
    if (!m.decoder) continue;
    const int64_t c = m.grpc.concurrency;
    const double goal = c == 1 ? 0.9 : 0.8;
    const char* goal_text = c == 1 ? ">= 90%" : (c == 32 ? ">= 80%" : "");
    const auto row = [&](const char* what, double baseline) {
      const double ratio = m.grpc.tokens_per_second() / std::max(1e-9, baseline);
      std::printf("| server tokens/s / %s at %lld streams | %.0f%% | %s | %s |\n", what,
                  static_cast<long long>(c), 100 * ratio, goal_text,
                  (c == 1 || c == 32) ? (ratio >= goal ? "yes" : "no") : "");
    };
    row("decoder step rate", m.decoder->step_tokens_per_second);
    row("decoder on the same workload", m.decoder->workload_tokens_per_second);
  }
  std::printf(
      "\nTTFT: call start to the first token-carrying message; ITL: gap between consecutive "
      "tokens of a request (tokens delivered in one message count 0); tokens/msg > 1 means the "
      "reader fell behind and got tokens batched. p99 of few samples is their maximum.\n");
}

int Run() {
  if (const std::string dir = absl::GetFlag(FLAGS_make_bench_model); !dir.empty()) {
    if (absl::Status s = WriteBenchModel(dir); !s.ok()) {
      std::fprintf(stderr, "serve_bench: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("wrote the bench model to %s\n", dir.c_str());
    return 0;
  }

  std::vector<int64_t> concurrency;
  for (const std::string& item : absl::GetFlag(FLAGS_concurrency)) {
    int64_t c = 0;
    if (!absl::SimpleAtoi(item, &c) || c < 1) {
      std::fprintf(stderr, "serve_bench: --concurrency: \"%s\" is not a positive count\n",
                   item.c_str());
      return 2;
    }
    concurrency.push_back(c);
  }
  if (concurrency.empty()) {
    std::fprintf(stderr, "serve_bench: --concurrency is empty\n");
    return 2;
  }
  const int64_t max_concurrency = *std::max_element(concurrency.begin(), concurrency.end());
  Workload workload;
  workload.requests_per_stream = absl::GetFlag(FLAGS_requests_per_stream);
  workload.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  workload.prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  workload.request_timeout = absl::GetFlag(FLAGS_request_timeout);
  const int64_t repeats = absl::GetFlag(FLAGS_repeats);
  if (repeats < 1) {
    std::fprintf(stderr, "serve_bench: --repeats must be positive\n");
    return 2;
  }
  if (workload.requests_per_stream < 1 || workload.max_new_tokens < 1 ||
      workload.prompt_tokens < 1) {
    std::fprintf(stderr,
                 "serve_bench: --requests_per_stream, --max_new_tokens and --prompt_tokens must "
                 "be positive\n");
    return 2;
  }

  absl::StatusOr<CpuPlacement> placement = CpuPlacement::Split(absl::GetFlag(FLAGS_client_cpus));
  if (!placement.ok()) {
    std::fprintf(stderr, "serve_bench: %s\n", placement.status().ToString().c_str());
    return 2;
  }
  // The measured side first: this thread's LibTorch set-up, the compute
  // thread (created here, before anything runs on it) and the server child
  // inherit its CPUs.
  if (!Pinned(placement->PinToServer())) return 1;
  int requested_threads = absl::GetFlag(FLAGS_threads);
  if (requested_threads == 0 && placement->split()) requested_threads = placement->server_cpus();
  const TorchRuntimeInfo runtime = ConfigureTorchRuntime(requested_threads);
  server::RunOnComputeThread([] {});
  const int threads = runtime.intra_op_threads;

  // Checked before the bench model is written, which takes a while.
  const std::string device = absl::GetFlag(FLAGS_device);
  if (absl::Status s = server::CheckServingDevice(device); !s.ok()) {
    std::fprintf(stderr, "serve_bench: %s\n", s.ToString().c_str());
    return 2;
  }
  std::string binary = absl::GetFlag(FLAGS_server_binary);
  if (binary.empty()) binary = DefaultServerBinary();
  if (absl::GetFlag(FLAGS_server).empty() && access(binary.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "serve_bench: no performer-serve at %s (--server_binary)\n",
                 binary.c_str());
    return 2;
  }

  // A scratch folder: the model repository (the model folder, or a link to
  // it), the port file and the server's log.
  std::string scratch_template = (fs::temp_directory_path() / "serve_bench.XXXXXX").string();
  if (mkdtemp(scratch_template.data()) == nullptr) {
    std::fprintf(stderr, "serve_bench: mkdtemp failed\n");
    return 1;
  }
  const fs::path scratch = scratch_template;
  // On every return: the bench model is ~80 MB.
  absl::Cleanup remove_scratch = [&scratch] { testing::RemoveTree(scratch); };
  const fs::path repository = scratch / "models";
  fs::create_directories(repository);
  std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  std::string model_name;
  if (model_dir.empty()) {
    model_name = "bench";
    model_dir = (repository / model_name).string();
    std::fprintf(stderr, "serve_bench: writing the bench model to %s\n", model_dir.c_str());
    // On the compute thread, like all model work of this process: a second
    // OpenMP team would slow the engine and decoder measured below.
    if (absl::Status s = server::RunOnComputeThread([&] { return WriteBenchModel(model_dir); });
        !s.ok()) {
      std::fprintf(stderr, "serve_bench: %s\n", s.ToString().c_str());
      return 1;
    }
  } else {
    const fs::path absolute = fs::absolute(model_dir);
    model_name = absolute.filename().string();
    if (model_name.empty()) model_name = absolute.parent_path().filename().string();
    std::error_code error;
    fs::create_directory_symlink(absolute, repository / model_name, error);
    if (error) {
      std::fprintf(stderr, "serve_bench: cannot link %s: %s\n", model_dir.c_str(),
                   error.message().c_str());
      return 1;
    }
  }
  std::ifstream config_in((fs::path(model_dir) / "config.json").string());
  const nlohmann::json config =
      nlohmann::json::parse(config_in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.contains("num_tokens")) {
    std::fprintf(stderr, "serve_bench: %s/config.json is not a PerformerLM config\n",
                 model_dir.c_str());
    return 1;
  }
  workload.vocab = config.value("num_tokens", int64_t{256});

  std::printf("# serve_bench\n\n");
  std::printf("- machine: %s, %u cores; %s; device %s; %s\n", CpuModel().c_str(),
              std::thread::hardware_concurrency(), DescribeTorchRuntime(runtime).c_str(),
              device.c_str(), placement->text().c_str());
  const int client_threads = absl::GetFlag(FLAGS_client_threads) > 0
                                 ? absl::GetFlag(FLAGS_client_threads)
                                 : (placement->split() ? placement->client_cpus() : 1);
  auto key = [&config](const char* name) {
    return config.contains(name) ? config[name].dump() : std::string("default");
  };
  std::printf(
      "- model: %s (%s), vocab %s, dim %s, depth %s, heads %s, dim_head %s, nb_features %s, "
      "max_seq_len %s; weights served in %s (server, engine and decoder)\n",
      model_name.c_str(), config.value("model_class", std::string("?")).c_str(),
      key("num_tokens").c_str(), key("dim").c_str(), key("depth").c_str(), key("heads").c_str(),
      key("dim_head").c_str(), key("nb_features").c_str(), key("max_seq_len").c_str(),
      models::WeightDtypeName(ServedWeightDtype()));
  std::printf(
      "- workload: per stream %lld requests back to back; prompt %lld tokens, %lld new tokens "
      "(greedy, ignore_eos); streams %s; %s; gRPC streams driven by %d client threads; %lld "
      "repeats (each figure from its side's median run)\n",
      static_cast<long long>(workload.requests_per_stream),
      static_cast<long long>(workload.prompt_tokens),
      static_cast<long long>(workload.max_new_tokens), absl::StrJoin(concurrency, ", ").c_str(),
      absl::GetFlag(FLAGS_shared_channel) ? "one shared gRPC channel"
                                          : "one gRPC channel (connection) per stream",
      client_threads, static_cast<long long>(repeats));
  std::fflush(stdout);

  // --- the server, then both measurements per concurrency ------------------
  std::vector<Measured> runs;
  {
    ServerProcess process;
    std::string address = absl::GetFlag(FLAGS_server);
    if (address.empty()) {
      const std::string port_file = (scratch / "port").string();
      std::vector<std::string> args = {
          absl::StrCat("--model_repository=", repository.string()),
          "--host=127.0.0.1",
          "--port=0",
          absl::StrCat("--port_file=", port_file),
          absl::StrCat("--http_port=", absl::GetFlag(FLAGS_http) ? 0 : -1),
          absl::StrCat("--http_port_file=", (scratch / "http_port").string()),
          absl::StrCat("--max_batch=", max_concurrency),
          absl::StrCat("--intra_op_threads=", threads),
          absl::StrCat("--device=", device),
          absl::StrCat("--max_new_tokens_limit=", std::max<int64_t>(4096, workload.max_new_tokens)),
          // Metrics and the request log stay on (what users run), on a free
          // port; --server_flags may turn them off.
          "--metrics_port=0",
      };
      for (const std::string& flag : absl::GetFlag(FLAGS_server_flags)) args.push_back(flag);
      std::fprintf(stderr, "serve_bench: starting %s %s\n", binary.c_str(),
                   absl::StrJoin(args, " ").c_str());
      if (absl::Status s = process.Start(binary, args, port_file, (scratch / "server.log").string(),
                                         absl::GetFlag(FLAGS_server_start_timeout));
          !s.ok()) {
        std::fprintf(stderr, "serve_bench: %s\n", s.ToString().c_str());
        return 1;
      }
      address = absl::StrCat("127.0.0.1:", process.port());
    }
    int http_port = -1;
    if (absl::GetFlag(FLAGS_http)) {
      std::ifstream in((scratch / "http_port").string());
      in >> http_port;
      if (http_port <= 0) {
        std::fprintf(stderr, "serve_bench: --http needs the server started here (no --server)\n");
        return 2;
      }
    }
    // From here this thread creates the client side: gRPC's channels and
    // threads, the load threads.
    if (!Pinned(placement->PinToClients())) return 1;

    auto make_stub = [&address](int64_t index) {
      grpc::ChannelArguments args;
      // Distinct arguments keep gRPC from sharing one connection between
      // channels: each stream gets its own, like independent clients.
      args.SetInt("performer.serve_bench.channel", static_cast<int>(index));
      std::shared_ptr<grpc::Channel> channel =
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
      // Connected before the clock starts: the first request's TTFT should
      // not include a TCP and HTTP/2 handshake.
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
      return v1::Generation::NewStub(channel);
    };
    std::unique_ptr<v1::Generation::Stub> control = make_stub(-1);
    {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::ListModelsResponse models;
      grpc::Status status = control->ListModels(&context, v1::ListModelsRequest(), &models);
      if (!status.ok()) {
        std::fprintf(stderr, "serve_bench: ListModels: %s\n", status.error_message().c_str());
        return 1;
      }
      for (const v1::ModelInfo& m : models.models()) {
        if (m.name() != models.default_model()) continue;
        std::printf(
            "- served as \"%s\" at %s: tokenizer %s; state %lld bytes/sequence (%s), %d slots\n",
            m.name().c_str(), address.c_str(),
            m.tokenizer().empty() ? "none" : m.tokenizer().c_str(),
            static_cast<long long>(m.state_bytes_per_sequence()),
            Mib(m.state_bytes_per_sequence()).c_str(), m.max_sequences());
        if (m.max_sequences() < max_concurrency) {
          std::printf("- **note**: %d slots < %lld streams: some requests queue\n",
                      m.max_sequences(), static_cast<long long>(max_concurrency));
        }
      }
      std::fflush(stdout);
    }
    // Warm-up: connections, the server's first-call paths.
    {
      Workload warm = workload;
      warm.max_new_tokens = std::min<int64_t>(8, workload.max_new_tokens);
      warm.requests_per_stream = 1;
      const LoadResult warmed = RunGrpcLoad(1, warm, {control.get()}, 1);
      if (warmed.errors > 0) {
        std::fprintf(stderr, "serve_bench: warm-up request failed: %s\n",
                     warmed.first_error.c_str());
        return 1;
      }
    }
    // The engine in-process, loaded now so that each concurrency is measured
    // over gRPC and in-process back to back: on a shared or throttled
    // machine, drift over the run then affects both sides of a ratio alike.
    // The server is idle meanwhile (its threads wait), and so is this
    // engine while the server runs.
    std::unique_ptr<server::ModelRepository> in_process;
    server::Engine* engine = nullptr;
    if (absl::GetFlag(FLAGS_engine)) {
      server::RepositoryOptions options;
      options.max_batch = max_concurrency;
      options.device = device;
      options.decode_step.weight_dtype = ServedWeightDtype();
      // The server's prefix cache (its default budget unless --server_flags
      // sets one): both sides then store and look up alike, and the ratio
      // is what the message path costs.
      options.engine.prefix_cache.max_bytes =
          ServedInteger("prefix_cache_bytes", server::kServerPrefixCacheBytes, 0);
      options.engine.prefix_cache.interval_tokens = options.engine.prefill_chunk_tokens;
      options.engine.max_prefills_per_step =
          ServedInteger("max_prefills_per_step", options.engine.max_prefills_per_step, 1);
      options.engine.stream_messages_per_step =
          ServedInteger("stream_messages_per_step", options.engine.stream_messages_per_step, 0);
      std::fprintf(stderr, "serve_bench: loading %s in-process\n", repository.c_str());
      // The engine's threads are the measured side's.
      if (!Pinned(placement->PinToServer())) return 1;
      absl::StatusOr<std::unique_ptr<server::ModelRepository>> loaded =
          server::ModelRepository::Load(repository.string(), options, model_name);
      if (!Pinned(placement->PinToClients())) return 1;
      if (!loaded.ok()) {
        std::fprintf(stderr, "serve_bench: %s\n", loaded.status().ToString().c_str());
        return 1;
      }
      in_process = std::move(*loaded);
      server::HostedModel* hosted = in_process->Find(model_name);
      if (hosted == nullptr || hosted->engine == nullptr) {
        std::fprintf(stderr, "serve_bench: %s is not a generating model\n", model_name.c_str());
        return 1;
      }
      engine = hosted->engine.get();
      std::printf("- engine in-process: state %lld bytes/sequence, %lld slots\n",
                  static_cast<long long>(engine->info().state_bytes_per_sequence),
                  static_cast<long long>(engine->info().capacity));
      std::fflush(stdout);
      Workload warm = workload;
      warm.max_new_tokens = std::min<int64_t>(8, workload.max_new_tokens);
      RequestTrace trace;
      if (absl::Status s = EngineOne(*engine, warm, 0, 999, 0, trace); !s.ok()) {
        std::fprintf(stderr, "serve_bench: engine warm-up failed: %s\n", s.ToString().c_str());
        return 1;
      }
    }

    for (int64_t c : concurrency) {
      std::vector<std::unique_ptr<v1::Generation::Stub>> stubs;
      std::vector<v1::Generation::Stub*> stub_of;
      for (int64_t s = 0; s < c; ++s) {
        stubs.push_back(absl::GetFlag(FLAGS_shared_channel) ? nullptr : make_stub(s));
        stub_of.push_back(stubs.back() ? stubs.back().get() : control.get());
      }
      // Each repeat runs the three sides back to back; each side reports
      // its median repeat.
      std::vector<std::unique_ptr<SseConnection>> connections;
      for (int64_t s = 0; http_port > 0 && s < c; ++s) {
        connections.push_back(std::make_unique<SseConnection>(http_port));
      }
      std::vector<LoadResult> grpc_runs, http_runs, engine_runs;
      std::vector<DecoderRates> decoder_runs;
      for (int64_t repeat = 0; repeat < repeats; ++repeat) {
        workload.first_request += workload.requests_per_stream;
        std::fprintf(stderr, "serve_bench: %lld streams: gRPC...", static_cast<long long>(c));
        {
          const CpuBusyMeter server_busy(placement->ServerCpus());
          const CpuBusyMeter client_busy(placement->ClientCpus());
          const ThreadCpuMeter server_threads(process.pid());
          grpc_runs.push_back(RunGrpcLoad(c, workload, stub_of, client_threads));
          grpc_runs.back().server_cpu_busy = server_busy.Percent();
          grpc_runs.back().client_cpu_busy = client_busy.Percent();
          const ThreadCpuMeter::Seconds cpu = server_threads.Elapsed();
          grpc_runs.back().server_compute_cpu_seconds = cpu.compute;
          grpc_runs.back().server_other_cpu_seconds = cpu.other;
        }
        std::fprintf(stderr, " %.0f tokens/s", grpc_runs.back().tokens_per_second());
        if (http_port > 0) {
          std::fprintf(stderr, "; HTTP...");
          http_runs.push_back(RunLoad(c, workload, [&](int64_t s, int64_t r, RequestTrace& trace) {
            return HttpStreamOne(*connections[s], model_name, workload, s, r, trace);
          }));
          std::fprintf(stderr, " %.0f tokens/s", http_runs.back().tokens_per_second());
        }
        if (engine != nullptr) {
          std::fprintf(stderr, "; engine...");
          engine_runs.push_back(
              RunLoad(c, workload, [&](int64_t s, int64_t r, RequestTrace& trace) {
                return EngineOne(*engine, workload, c, s, r, trace);
              }));
          std::fprintf(stderr, " %.0f tokens/s", engine_runs.back().tokens_per_second());
        }
        if (absl::GetFlag(FLAGS_decoder)) {
          std::fprintf(stderr, "; decoder...");
          absl::StatusOr<DecoderRates> rate =
              DecoderTokensPerSecond((repository / model_name).string(), c, workload);
          if (rate.ok()) {
            decoder_runs.push_back(*rate);
            std::fprintf(stderr, " steps %.0f, workload %.0f tokens/s",
                         rate->step_tokens_per_second, rate->workload_tokens_per_second);
          } else {
            std::fprintf(stderr, " failed: %s", rate.status().ToString().c_str());
          }
        }
        std::fprintf(stderr, "\n");
      }
      Measured m;
      m.paired_engine_ratio = PairedRatio(grpc_runs, engine_runs);
      m.grpc = MedianRun(grpc_runs);
      if (!http_runs.empty()) m.http = MedianRun(http_runs);
      if (!engine_runs.empty()) m.engine = MedianRun(engine_runs);
      if (!decoder_runs.empty()) m.decoder = MedianRates(decoder_runs);
      runs.push_back(std::move(m));
    }
    if (in_process != nullptr) in_process->Stop();
    if (absl::GetFlag(FLAGS_server).empty()) {
      absl::StatusOr<int> exit_code = process.Stop(absl::Seconds(60));
      if (!exit_code.ok() || *exit_code != 0) {
        std::printf("\n**performer-serve did not exit cleanly on SIGTERM**: %s\n",
                    exit_code.ok() ? absl::StrCat("exit status ", *exit_code).c_str()
                                   : exit_code.status().ToString().c_str());
      }
    }
  }

  PrintReport(runs);
  return 0;
}

}  // namespace
}  // namespace performer

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serving load generator: streamed tokens/s, TTFT and inter-token latency over gRPC vs "
      "the engine in-process.\nUsage: serve_bench [--model_dir=DIR] [--concurrency=1,8,32,64] "
      "[flags]");
  absl::ParseCommandLine(argc, argv);
  // As performer-serve runs (server/serve_main.cc), so that the in-process
  // engine's locks cost what the server's do.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // LibTorch and gRPC report some failures by exception: a message, not an
  // abort.
  try {
    return performer::Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve_bench: %s\n", e.what());
    return 1;
  }
}
