// A multi-turn chat workload on one engine, in-process: `sessions`
// conversations of `turns` turns each, every turn a new user message of
// about `message_tokens` tokens and `reply_tokens` generated ones, the
// conversations interleaved turn by turn (as concurrent users would be).
// Three ways to send it, measured in one run on one model:
//   history          every turn sends the whole conversation so far, no cache
//   history + cache  the same requests with the prefix-state cache on
//   sessions         every turn sends only its new message with a session_id
// Reported per way: mean and p90 time to first token, prompt tokens sent,
// prompt tokens prefilled (sent minus those served from a state), and the
// share of the history (what the model conditioned on before the new
// message) served from a state.
// Then: a repeated long prompt, cold and from the cache (time to first
// token of each).
//
//   build/bench/chat_bench [--model_dir=models/performer-fortunes]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/decoding/decoder_factory.h"
#include "core/models/model_folder.h"
#include "core/runtime/torch_runtime.h"
#include "server/engine/compute_thread.h"
#include "server/engine/engine.h"

ABSL_FLAG(std::string, model_dir, PERFORMER_DEFAULT_MODEL_DIR, "Model folder to serve.");
ABSL_FLAG(int, sessions, 4, "Conversations.");
ABSL_FLAG(int, turns, 6, "Turns per conversation.");
ABSL_FLAG(int, message_tokens, 120, "Tokens of each user message.");
ABSL_FLAG(int, reply_tokens, 32, "Tokens generated per turn.");
ABSL_FLAG(int, long_prompt_tokens, 1400, "The repeated long prompt's length.");
ABSL_FLAG(int, prefill_chunk_tokens, 512, "The engine's prefill chunk.");

namespace performer::bench {
namespace {

using server::Engine;
using server::EngineOptions;
using server::GenerationRequest;
using server::RequestStream;
using server::StreamSummary;

// Runs one request to its end; the summary and the generated tokens.
struct Result {
  StreamSummary summary;
  std::vector<int64_t> tokens;
};

Result Run(Engine& engine, GenerationRequest request) {
  auto stream = std::make_shared<RequestStream>();
  Result result;
  const absl::Status submitted = engine.Submit(std::move(request), stream);
  if (!submitted.ok()) {
    std::fprintf(stderr, "refused: %s\n", submitted.ToString().c_str());
    std::exit(1);
  }
  const absl::Time end = absl::Now() + absl::Minutes(5);
  while (absl::Now() < end) {
    RequestStream::Taken taken = stream->Take();
    result.tokens.insert(result.tokens.end(), taken.chunk.token_ids.begin(),
                         taken.chunk.token_ids.end());
    if (taken.summary.has_value()) {
      result.summary = *taken.summary;
      if (!result.summary.status.ok()) {
        std::fprintf(stderr, "failed: %s\n", result.summary.status.ToString().c_str());
        std::exit(1);
      }
      return result;
    }
    absl::SleepFor(absl::Microseconds(200));
  }
  std::fprintf(stderr, "a request did not finish within 5 minutes\n");
  std::exit(1);
}

std::unique_ptr<Engine> MakeEngine(const models::LoadedModel& model, int64_t cache_bytes) {
  EngineOptions options;
  options.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  options.prefix_cache.max_bytes = cache_bytes;
  options.prefix_cache.interval_tokens = options.prefill_chunk_tokens;
  options.sessions.max_bytes = int64_t{1} << 30;
  absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> decoder = server::RunOnComputeThread(
      [&] { return decoding::CreateDecoder(model, absl::GetFlag(FLAGS_sessions)); });
  if (!decoder.ok()) {
    std::fprintf(stderr, "%s\n", decoder.status().ToString().c_str());
    std::exit(1);
  }
  return std::make_unique<Engine>("chat", *std::move(decoder), nullptr, options);
}

// A user message: printable bytes that differ between users and turns.
std::vector<int64_t> Message(int user, int turn, int length) {
  const std::string text =
      absl::StrCat("User ", user, " asks question ", turn, ": what is the meaning of all this? ");
  std::vector<int64_t> out;
  for (int i = 0; i < length; ++i) out.push_back(static_cast<unsigned char>(text[i % text.size()]));
  return out;
}

GenerationRequest Request(std::vector<int64_t> prompt, const std::string& session,
                          bool create_session) {
  static int next_id = 0;
  GenerationRequest r;
  r.request_id = absl::StrCat("r", next_id++);
  r.prompt = std::move(prompt);
  r.sampling = generation::SamplingParams::Greedy();
  r.sampling.max_new_tokens = absl::GetFlag(FLAGS_reply_tokens);
  r.session_id = session;
  r.create_session = create_session;
  return r;
}

struct WayResult {
  std::vector<double> ttft;
  int64_t sent = 0;
  int64_t prefilled = 0;
  int64_t history = 0;  // tokens conditioned on before each turn's message
  int64_t reused = 0;   // tokens served from a cached or session state
};

enum class Way { kHistory, kSessions };

WayResult RunChat(Engine& engine, Way way) {
  const int users = absl::GetFlag(FLAGS_sessions), turns = absl::GetFlag(FLAGS_turns);
  std::vector<std::vector<int64_t>> history(static_cast<size_t>(users));
  WayResult out;
  static int run = 0;
  ++run;
  for (int turn = 0; turn < turns; ++turn) {
    // Each turn of every user at once, as concurrent clients.
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::vector<std::vector<int64_t>> messages;
    for (int user = 0; user < users; ++user) {
      messages.push_back(Message(user, turn, absl::GetFlag(FLAGS_message_tokens)));
    }
    std::vector<Result> results(static_cast<size_t>(users));
    std::vector<std::thread> clients;
    for (int user = 0; user < users; ++user) {
      clients.emplace_back([&, user] {
        const size_t u = static_cast<size_t>(user);
        std::vector<int64_t> prompt = messages[u];
        std::string session;
        if (way == Way::kHistory) {
          prompt = history[u];
          prompt.insert(prompt.end(), messages[u].begin(), messages[u].end());
        } else {
          session = absl::StrCat("run", run, "-user", user);
        }
        results[u] =
            Run(engine, Request(std::move(prompt), session, !session.empty() && turn == 0));
      });
    }
    for (std::thread& t : clients) t.join();
    for (int user = 0; user < users; ++user) {
      const size_t u = static_cast<size_t>(user);
      const StreamSummary& s = results[u].summary;
      out.ttft.push_back(s.time_to_first_token_seconds);
      // A session turn's prompt_tokens count its history too; the client
      // sent only the message.
      out.sent += way == Way::kHistory ? s.prompt_tokens : static_cast<int64_t>(messages[u].size());
      out.prefilled += s.prompt_tokens - s.cached_prompt_tokens;
      out.history += s.prompt_tokens - static_cast<int64_t>(messages[u].size());
      out.reused += s.cached_prompt_tokens;
      history[u].insert(history[u].end(), messages[u].begin(), messages[u].end());
      history[u].insert(history[u].end(), results[u].tokens.begin(), results[u].tokens.end());
    }
  }
  return out;
}

double Mean(const std::vector<double>& v) {
  double total = 0;
  for (double x : v) total += x;
  return v.empty() ? 0 : total / static_cast<double>(v.size());
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

int Main() {
  ConfigureTorchRuntime(0);
  absl::StatusOr<models::LoadedModel> model = server::RunOnComputeThread(
      [&] { return models::LoadModelFolder(absl::GetFlag(FLAGS_model_dir)); });
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "%d conversations x %d turns, %d-token messages, %d-token replies, prefill chunk %d\n\n",
      absl::GetFlag(FLAGS_sessions), absl::GetFlag(FLAGS_turns),
      absl::GetFlag(FLAGS_message_tokens), absl::GetFlag(FLAGS_reply_tokens),
      absl::GetFlag(FLAGS_prefill_chunk_tokens));
  std::printf(
      "| way | mean TTFT ms | p90 TTFT ms | prompt tokens sent | prompt tokens prefilled | "
      "prefill saved | history from a state |\n|---|---:|---:|---:|---:|---:|---:|\n");
  int64_t baseline = 0;
  for (int way = 0; way < 3; ++way) {
    std::unique_ptr<Engine> engine = MakeEngine(*model, way == 1 ? int64_t{1} << 30 : 0);
    const WayResult r = RunChat(*engine, way == 2 ? Way::kSessions : Way::kHistory);
    if (way == 0) baseline = r.prefilled;
    const char* name = way == 0 ? "history" : way == 1 ? "history + prefix cache" : "sessions";
    std::printf("| %s | %.1f | %.1f | %lld | %lld | %.0f%% | %.1f%% |\n", name, Mean(r.ttft) * 1e3,
                Percentile(r.ttft, 0.9) * 1e3, static_cast<long long>(r.sent),
                static_cast<long long>(r.prefilled),
                100.0 * (1.0 - static_cast<double>(r.prefilled) / static_cast<double>(baseline)),
                r.history == 0
                    ? 0.0
                    : 100.0 * static_cast<double>(r.reused) / static_cast<double>(r.history));
  }

  // The same long prompt twice, and a third time on a server without cache.
  std::unique_ptr<Engine> engine = MakeEngine(*model, int64_t{1} << 30);
  std::vector<int64_t> prompt;
  for (int i = 0; i < absl::GetFlag(FLAGS_long_prompt_tokens); ++i) {
    prompt.push_back(Message(i / 100, i, 1)[0] + i % 3);
  }
  const Result cold = Run(*engine, Request(prompt, "", false));
  const Result warm = Run(*engine, Request(prompt, "", false));
  std::printf(
      "\nrepeated %zu-token prompt: cold TTFT %.1f ms, cached TTFT %.1f ms (%.1fx), cached prompt "
      "tokens %lld, same tokens: %s\n",
      prompt.size(), cold.summary.time_to_first_token_seconds * 1e3,
      warm.summary.time_to_first_token_seconds * 1e3,
      cold.summary.time_to_first_token_seconds / warm.summary.time_to_first_token_seconds,
      static_cast<long long>(warm.summary.cached_prompt_tokens),
      cold.tokens == warm.tokens ? "yes" : "NO");
  return 0;
}

}  // namespace
}  // namespace performer::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return performer::bench::Main();
}
