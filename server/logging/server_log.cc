#include "server/logging/server_log.h"

#include <fmt/format.h>
#include <spdlog/formatter.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace performer::server {
namespace {

enum class LineFormat { kPlain, kJson };

// The fields of the event being written on this thread. spdlog hands a
// formatter nothing but a string payload, so LogEvent parks the fields here for
// the duration of its call and the formatter reads them back: the design of
// spdlog's own mapped diagnostic context (spdlog/mdc.h, 1.13). It holds
// because the logger is synchronous (formatting happens inside the caller's
// log call) and keeps no backtrace (which would format later, elsewhere).
thread_local const LogFields* current_fields = nullptr;

class ScopedEventFields {
 public:
  explicit ScopedEventFields(const LogFields& fields) : previous_(current_fields) {
    current_fields = &fields;
  }
  ~ScopedEventFields() { current_fields = previous_; }
  ScopedEventFields(const ScopedEventFields&) = delete;
  ScopedEventFields& operator=(const ScopedEventFields&) = delete;

 private:
  const LogFields* previous_;
};

// The flag spellings, not spdlog's ("warning"), so that a line's level reads
// the same as the --log_level value that lets it through.
const char* LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

// RFC 3339, UTC, milliseconds: sorts as text and needs no time zone to read.
std::string Timestamp(spdlog::log_clock::time_point time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(time), absl::UTCTimeZone());
}

// nlohmann's default error handler throws on invalid UTF-8; a log line must
// not, and a value that arrived from a client (a model name, an error message)
// may be anything.
std::string DumpJson(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false,
                    nlohmann::ordered_json::error_handler_t::replace);
}

bool IsReservedKey(std::string_view key) { return key == "ts" || key == "level" || key == "msg"; }

std::string JsonLine(spdlog::log_clock::time_point time, spdlog::level::level_enum level,
                     std::string_view message, const LogFields& fields) {
  nlohmann::ordered_json line;
  line["ts"] = Timestamp(time);
  line["level"] = LevelName(level);
  line["msg"] = message;
  for (const LogField& field : fields) {
    nlohmann::ordered_json& slot =
        IsReservedKey(field.key) ? line["field_" + field.key] : line[field.key];
    std::visit([&slot](const auto& value) { slot = value; }, field.value.value());
  }
  std::string out = DumpJson(line);
  out.push_back('\n');
  return out;
}

// A plain-format string value is written bare when a reader can still tell
// where it ends, and quoted with JSON escapes otherwise.
bool IsBareWord(std::string_view value) {
  if (value.empty()) return false;
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f || c == '"' || c == '=' || c == '\\') return false;
  }
  return true;
}

void AppendPlainValue(const LogValue::Variant& value, std::string* out) {
  if (const auto* text = std::get_if<std::string>(&value)) {
    if (IsBareWord(*text)) {
      out->append(*text);
    } else {
      out->append(DumpJson(*text));
    }
  } else if (const auto* integer = std::get_if<int64_t>(&value)) {
    absl::StrAppend(out, *integer);
  } else if (const auto* real = std::get_if<double>(&value)) {
    // Shortest text that reads back as the same double (absl's %g would
    // round to six digits).
    out->append(fmt::format("{}", *real));
  } else {
    out->append(std::get<bool>(value) ? "true" : "false");
  }
}

// The message is written as is, except for control characters: one event must
// stay one line.
void AppendPlainMessage(std::string_view message, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (byte < 0x20 || byte == 0x7f) {
      out->append({'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]});
    } else {
      out->push_back(c);
    }
  }
}

std::string PlainLine(spdlog::log_clock::time_point time, spdlog::level::level_enum level,
                      std::string_view message, const LogFields& fields) {
  std::string out = absl::StrCat("[", Timestamp(time), "] [", LevelName(level), "] ");
  AppendPlainMessage(message, &out);
  for (const LogField& field : fields) {
    absl::StrAppend(&out, " ", field.key, "=");
    AppendPlainValue(field.value.value(), &out);
  }
  out.push_back('\n');
  return out;
}

class EventFormatter final : public spdlog::formatter {
 public:
  explicit EventFormatter(LineFormat format) : format_(format) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    // Lines from direct spdlog calls have no fields.
    const LogFields none;
    const LogFields& fields = current_fields != nullptr ? *current_fields : none;
    const std::string_view message(msg.payload.data(), msg.payload.size());
    const std::string line = format_ == LineFormat::kJson
                                 ? JsonLine(msg.time, msg.level, message, fields)
                                 : PlainLine(msg.time, msg.level, message, fields);
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<EventFormatter>(format_);
  }

 private:
  LineFormat format_;
};

absl::StatusOr<LineFormat> ParseFormat(const std::string& text) {
  if (text == "plain") return LineFormat::kPlain;
  if (text == "json") return LineFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format must be \"plain\" or \"json\", not \"", text, "\""));
}

absl::StatusOr<spdlog::level::level_enum> ParseLevel(const std::string& text) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off},
  };
  for (const auto& [name, level] : kLevels) {
    if (text == name) return level;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_level must be one of trace, debug, info, warn, error, off, not \"", text, "\""));
}

std::atomic<bool> configured{false};

void Install(LineFormat format, spdlog::level::level_enum level, spdlog::sink_ptr sink) {
  sink->set_formatter(std::make_unique<EventFormatter>(format));
  auto logger = std::make_shared<spdlog::logger>("performer", std::move(sink));
  logger->set_level(level);
  spdlog::set_default_logger(std::move(logger));
  configured.store(true, std::memory_order_release);
}

// spdlog's own default logger writes coloured text to stdout and would drop
// the fields, so an event logged before InitLogging (a unit test, a tool
// linking the server library) gets the server's defaults instead.
std::shared_ptr<spdlog::logger> ServerLogger() {
  if (!configured.load(std::memory_order_acquire)) {
    static std::once_flag defaults;
    std::call_once(defaults, [] {
      if (!configured.load(std::memory_order_acquire)) {
        Install(LineFormat::kPlain, spdlog::level::info,
                std::make_shared<spdlog::sinks::stderr_sink_mt>());
      }
    });
  }
  return spdlog::default_logger();
}

absl::Status InitLoggingWithSink(const std::string& format_flag, const std::string& level_flag,
                                 spdlog::sink_ptr sink) {
  absl::StatusOr<LineFormat> format = ParseFormat(format_flag);
  if (!format.ok()) return format.status();
  absl::StatusOr<spdlog::level::level_enum> level = ParseLevel(level_flag);
  if (!level.ok()) return level.status();
  Install(*format, *level, std::move(sink));
  return absl::OkStatus();
}

}  // namespace

absl::Status InitLogging(const std::string& format, const std::string& level) {
  return InitLoggingWithSink(format, level, std::make_shared<spdlog::sinks::stderr_sink_mt>());
}

absl::Status InitLogging(const std::string& format, const std::string& level, std::ostream& out) {
  return InitLoggingWithSink(format, level,
                             std::make_shared<spdlog::sinks::ostream_sink_mt>(out, true));
}

bool LogEnabled(spdlog::level::level_enum level) { return ServerLogger()->should_log(level); }

void LogEvent(spdlog::level::level_enum level, std::string_view message, const LogFields& fields) {
  const std::shared_ptr<spdlog::logger> logger = ServerLogger();
  if (!logger->should_log(level)) return;
  ScopedEventFields scoped(fields);
  // The overload without format arguments: a '{' in the message is text.
  logger->log(level, spdlog::string_view_t(message.data(), message.size()));
}

spdlog::level::level_enum RequestLogLevel(std::string_view status) {
  if (status == "OK" || status == "CANCELLED" || status == "DEADLINE_EXCEEDED") {
    return spdlog::level::info;
  }
  if (status == "INTERNAL" || status == "UNKNOWN" || status == "DATA_LOSS") {
    return spdlog::level::err;
  }
  return spdlog::level::warn;
}

void LogRequest(const RequestLogEntry& entry) {
  const spdlog::level::level_enum level = RequestLogLevel(entry.status);
  if (!LogEnabled(level)) return;
  LogFields fields = {
      {"request_id", entry.request_id},
      {"method", entry.method},
      {"model", entry.model},
      {"status", entry.status},
  };
  if (!entry.finish_reason.empty()) fields.push_back({"finish_reason", entry.finish_reason});
  fields.push_back({"prompt_tokens", entry.prompt_tokens});
  fields.push_back({"generated_tokens", entry.generated_tokens});
  fields.push_back({"queue_seconds", entry.queue_seconds});
  if (entry.ttft_seconds.has_value()) fields.push_back({"ttft_seconds", *entry.ttft_seconds});
  fields.push_back({"duration_seconds", entry.duration_seconds});
  if (!entry.peer.empty()) fields.push_back({"peer", entry.peer});
  if (!entry.caller.empty()) fields.push_back({"caller", entry.caller});
  if (!entry.error_message.empty()) fields.push_back({"error", entry.error_message});
  LogEvent(level, "request", fields);
}

void LogEngineEvent(std::string_view event, std::string_view model, const LogFields& extra,
                    spdlog::level::level_enum level) {
  if (!LogEnabled(level)) return;
  LogFields fields;
  fields.reserve(2 + extra.size());
  fields.push_back({"event", event});
  fields.push_back({"model", model});
  fields.insert(fields.end(), extra.begin(), extra.end());
  LogEvent(level, "engine", fields);
}

}  // namespace performer::server
