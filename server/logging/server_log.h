// Structured logging for performer-serve: one process-wide logger that writes
// one line per event to stderr, as plain text for people or as JSON for log
// collectors (--log_format), filtered by severity (--log_level).
//
// Callers describe an event as a message plus typed fields and never format a
// line themselves, so both formats carry the same information and a value can
// never break the line structure (quotes, newlines and non-ASCII text in a
// value are escaped; invalid UTF-8 is replaced by U+FFFD).
//
//   plain: [2026-11-22T18:01:02.123Z] [info] request request_id=r1 model=lm ...
//   json:  {"ts":"2026-11-22T18:01:02.123Z","level":"info","msg":"request",
//           "request_id":"r1","model":"lm",...}
//
// spdlog is the engine underneath: its sinks are thread-safe and its level
// check is one comparison, so a disabled event costs nothing but the call.
// The logger is also installed as spdlog's default logger, so code that calls
// spdlog::info() directly produces lines in the same format (without fields).
#pragma once

#include <spdlog/common.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace performer::server {

// One field value. Any integer converts to int64 (an unsigned value above
// INT64_MAX wraps: log counts, not hashes), any floating-point value to double,
// and any string-like value to a string; the conversions are implicit so that
// a field list reads as {{"model", name}, {"tokens", n}, {"cached", true}}.
class LogValue {
 public:
  using Variant = std::variant<std::string, int64_t, double, bool>;

  LogValue(std::string value) : value_(std::move(value)) {}
  LogValue(std::string_view value) : value_(std::string(value)) {}
  // Without this overload a string literal would convert to bool.
  LogValue(const char* value) : value_(std::string(value)) {}
  LogValue(bool value) : value_(value) {}
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  LogValue(T value) : value_(static_cast<int64_t>(value)) {}
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  LogValue(T value) : value_(static_cast<double>(value)) {}

  const Variant& value() const { return value_; }

 private:
  Variant value_;
};

// A named value attached to an event. Keys are identifiers (letters, digits,
// '_'), unique within an event; "ts", "level" and "msg" are taken by the line
// itself, so a field with one of those keys is written as "field_<key>".
struct LogField {
  std::string key;
  LogValue value;
};

// Fields in the order they are written.
using LogFields = std::vector<LogField>;

// Configures the process-wide logger to write to stderr. `format` is "plain"
// or "json"; `level` is the lowest severity written: "trace", "debug",
// "info", "warn", "error" or "off". Returns INVALID_ARGUMENT naming the flag
// (--log_format or --log_level) for any other value, and then changes
// nothing. May be called again to reconfigure, but not while other threads
// are logging. Until it is first called, events are written as if it had been
// called with ("plain", "info").
absl::Status InitLogging(const std::string& format, const std::string& level);

// As above, but writes to `out` instead of stderr (for tests and embedding).
// `out` must outlive the logger: until the next InitLogging call.
absl::Status InitLogging(const std::string& format, const std::string& level, std::ostream& out);

// Whether an event of `level` would be written: lets a caller skip building
// fields that are costly to compute.
bool LogEnabled(spdlog::level::level_enum level);

// Writes one event: `message` says what happened, `fields` carry its data.
// Thread-safe; never throws.
void LogEvent(spdlog::level::level_enum level, std::string_view message,
              const LogFields& fields = {});

// What the server knows about one finished RPC.
struct RequestLogEntry {
  std::string request_id;
  std::string model;
  std::string method;  // GenerateStream, Generate, Embed, Cancel, ListModels, GetModel
  std::string status;  // gRPC code name, as in the metrics' `code` label: "OK", "CANCELLED"...
  std::string finish_reason;  // length, eos, stop_token, ...; empty when nothing was generated
  std::string peer;           // grpc::ServerContext::peer(), e.g. "ipv4:10.0.0.7:53212"
  // The caller's token name (--auth_tokens_file); empty without tokens.
  // Never the token itself.
  std::string caller;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double queue_seconds = 0;  // admission to first scheduling by the engine
  // Arrival to first generated token; absent when no token was generated.
  std::optional<double> ttft_seconds;
  double duration_seconds = 0;  // arrival to the final status
  std::string error_message;    // the status message when status is not OK
};

// The severity of a request's line, from its gRPC code name:
//   info  OK, CANCELLED, DEADLINE_EXCEEDED: the request did what its client
//         asked, or the client gave up; neither needs an operator.
//   error INTERNAL, UNKNOWN, DATA_LOSS: a server fault, worth a look each time.
//   warn  everything else: refused requests (INVALID_ARGUMENT, NOT_FOUND,
//         RESOURCE_EXHAUSTED, UNAVAILABLE while draining, ...), which are the
//         client's problem one at a time but the operator's in numbers.
spdlog::level::level_enum RequestLogLevel(std::string_view status);

// Writes exactly one "request" event per finished RPC, at RequestLogLevel.
// Fields, in order: request_id, method, model, status, finish_reason,
// prompt_tokens, generated_tokens, queue_seconds, ttft_seconds,
// duration_seconds, peer, caller, error. finish_reason, ttft_seconds, peer,
// caller and error are left out when empty/absent; the rest are always present so that log
// queries can rely on them.
void LogRequest(const RequestLogEntry& entry);

// Writes an "engine" event about one hosted model's engine: `event` is what
// happened ("load", "warmup", "ready", "drain", "stopped", ...), `extra` its
// data (load_seconds, capacity, ...). Fields: event, model, then `extra`.
void LogEngineEvent(std::string_view event, std::string_view model, const LogFields& extra = {},
                    spdlog::level::level_enum level = spdlog::level::info);

}  // namespace performer::server
