#include "server/logging/server_log.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"

namespace performer::server {
namespace {

class ServerLogTest : public ::testing::Test {
 protected:
  // The logger holds a reference to out_: point it back at stderr before
  // out_ goes away.
  void TearDown() override { ASSERT_TRUE(InitLogging("plain", "info").ok()); }

  void Init(const std::string& format, const std::string& level) {
    ASSERT_TRUE(InitLogging(format, level, out_).ok());
  }

  std::vector<std::string> Lines() const {
    std::vector<std::string> lines = absl::StrSplit(out_.str(), '\n');
    // Every line ends in '\n', so the last piece is empty.
    EXPECT_TRUE(!lines.empty() && lines.back().empty()) << out_.str();
    if (!lines.empty()) lines.pop_back();
    return lines;
  }

  std::vector<nlohmann::json> JsonLines() const {
    std::vector<nlohmann::json> parsed;
    for (const std::string& line : Lines()) {
      nlohmann::json value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_FALSE(value.is_discarded()) << "not JSON: " << line;
      parsed.push_back(std::move(value));
    }
    return parsed;
  }

  std::ostringstream out_;
};

std::vector<std::string> KeysInOrder(const std::string& line) {
  const nlohmann::ordered_json object = nlohmann::ordered_json::parse(line);
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  return keys;
}

// "2026-11-22T18:01:02.123Z": RFC 3339 in UTC with milliseconds.
bool IsRfc3339Millis(std::string_view text) {
  constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (text.size() != kShape.size()) return false;
  for (size_t i = 0; i < kShape.size(); ++i) {
    const bool ok = kShape[i] == 'd' ? std::isdigit(static_cast<unsigned char>(text[i])) != 0
                                     : text[i] == kShape[i];
    if (!ok) return false;
  }
  return true;
}

TEST_F(ServerLogTest, JsonLineHasTimestampLevelMessageAndTypedFields) {
  Init("json", "info");
  LogEvent(spdlog::level::info, "loaded",
           {{"model", "lm"}, {"layers", 12}, {"seconds", 2.0}, {"cuda", false}});
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json& line = lines[0];
  ASSERT_TRUE(line["ts"].is_string());
  EXPECT_TRUE(IsRfc3339Millis(line["ts"].get<std::string>())) << line["ts"];
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["msg"], "loaded");
  ASSERT_TRUE(line["model"].is_string());
  EXPECT_EQ(line["model"], "lm");
  ASSERT_TRUE(line["layers"].is_number_integer());
  EXPECT_EQ(line["layers"].get<int64_t>(), 12);
  // A whole double stays a floating-point number, so a field's JSON type
  // does not depend on its value.
  ASSERT_TRUE(line["seconds"].is_number_float());
  EXPECT_DOUBLE_EQ(line["seconds"].get<double>(), 2.0);
  ASSERT_TRUE(line["cuda"].is_boolean());
  EXPECT_FALSE(line["cuda"].get<bool>());
  // ts, level, msg, then the fields in the order given.
  EXPECT_EQ(KeysInOrder(Lines()[0]),
            (std::vector<std::string>{"ts", "level", "msg", "model", "layers", "seconds", "cuda"}));
}

TEST_F(ServerLogTest, JsonEscapesSpecialCharactersAndKeepsOneLinePerEvent) {
  Init("json", "info");
  const std::string tricky =
      "say \"hi\"\nthen\tleave \\ now \x01 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac";
  LogEvent(spdlog::level::info, tricky, {{"error", tricky}});
  const std::vector<std::string> raw = Lines();
  ASSERT_EQ(raw.size(), 1u) << "the newline must be escaped";
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["msg"], tricky);
  EXPECT_EQ(lines[0]["error"], tricky);
  EXPECT_NE(raw[0].find(R"(say \"hi\"\nthen\tleave \\ now \u0001)"), std::string::npos) << raw[0];
}

TEST_F(ServerLogTest, InvalidUtf8IsReplacedNotThrown) {
  Init("json", "info");
  LogEvent(spdlog::level::info, "bad \xff bytes", {{"model", std::string("m\xc3")}});
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["msg"], "bad \xef\xbf\xbd bytes");  // U+FFFD
  EXPECT_EQ(lines[0]["model"], "m\xef\xbf\xbd");
}

TEST_F(ServerLogTest, ReservedKeysDoNotOverwriteTheLine) {
  Init("json", "info");
  LogEvent(spdlog::level::info, "event", {{"msg", "field"}, {"level", 3}});
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["msg"], "event");
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_EQ(lines[0]["field_msg"], "field");
  EXPECT_EQ(lines[0]["field_level"], 3);
}

TEST_F(ServerLogTest, MessageIsTextNotAFormatString) {
  Init("json", "info");
  LogEvent(spdlog::level::info, "braces {} {0} stay");
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["msg"], "braces {} {0} stay");
}

TEST_F(ServerLogTest, PlainLineHasBracketedTimestampLevelAndKeyValues) {
  Init("plain", "info");
  LogEvent(spdlog::level::warn, "queue full",
           {{"model", "lm"},
            {"queued", 64},
            {"wait_seconds", 0.25},
            {"draining", true},
            {"reason", "no free slot"},
            {"empty", ""}});
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  // "[" + 24-character timestamp + "] " + the rest.
  ASSERT_GT(lines[0].size(), 27u) << lines[0];
  EXPECT_EQ(lines[0].substr(0, 1), "[");
  EXPECT_TRUE(IsRfc3339Millis(lines[0].substr(1, 24))) << lines[0];
  EXPECT_EQ(lines[0].substr(25),
            "] [warn] queue full model=lm queued=64 wait_seconds=0.25 draining=true "
            "reason=\"no free slot\" empty=\"\"");
}

TEST_F(ServerLogTest, PlainQuotesValuesThatWouldBreakTheLine) {
  Init("plain", "info");
  LogEvent(spdlog::level::info, "two\nlines", {{"error", "bad \"x\"\nhere"}, {"name", "a=b"}});
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(R"([info] two\nlines error="bad \"x\"\nhere" name="a=b")"),
            std::string::npos)
      << lines[0];
}

TEST_F(ServerLogTest, LevelFilterDropsLowerLevels) {
  Init("json", "warn");
  EXPECT_FALSE(LogEnabled(spdlog::level::info));
  EXPECT_TRUE(LogEnabled(spdlog::level::warn));
  LogEvent(spdlog::level::trace, "trace");
  LogEvent(spdlog::level::debug, "debug");
  LogEvent(spdlog::level::info, "info");
  LogEvent(spdlog::level::warn, "warn");
  LogEvent(spdlog::level::err, "error");
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["level"], "warn");
  EXPECT_EQ(lines[0]["msg"], "warn");
  EXPECT_EQ(lines[1]["level"], "error");
  EXPECT_EQ(lines[1]["msg"], "error");
}

TEST_F(ServerLogTest, TraceWritesEverythingAndOffNothing) {
  Init("plain", "trace");
  LogEvent(spdlog::level::trace, "a");
  LogEvent(spdlog::level::debug, "b");
  EXPECT_EQ(Lines().size(), 2u);
  out_.str("");
  Init("plain", "off");
  LogEvent(spdlog::level::err, "c");
  LogRequest({});
  EXPECT_EQ(out_.str(), "");
}

TEST_F(ServerLogTest, BadFormatOrLevelIsInvalidArgumentNamingTheFlag) {
  Init("json", "info");
  std::ostringstream elsewhere;
  const absl::Status format = InitLogging("yaml", "info", elsewhere);
  EXPECT_EQ(format.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(format.message().find("--log_format"), std::string::npos) << format;
  EXPECT_NE(format.message().find("yaml"), std::string::npos) << format;
  const absl::Status level = InitLogging("plain", "verbose", elsewhere);
  EXPECT_EQ(level.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(level.message().find("--log_level"), std::string::npos) << level;
  EXPECT_EQ(InitLogging("plain", "warning", elsewhere).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InitLogging("", "info").code(), absl::StatusCode::kInvalidArgument);
  // A refused configuration leaves the previous one in place.
  LogEvent(spdlog::level::info, "still here");
  EXPECT_EQ(elsewhere.str(), "");
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["msg"], "still here");
}

TEST_F(ServerLogTest, DirectSpdlogCallsGetTheSameFormat) {
  Init("json", "info");
  spdlog::info("from {}", "spdlog");
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["msg"], "from spdlog");
  EXPECT_EQ(lines[0]["level"], "info");
}

TEST_F(ServerLogTest, LogValueConversionsKeepTheirKind) {
  Init("json", "info");
  const size_t count = 7;
  const uint32_t small = 3;
  const float ratio = 0.5f;
  const char* name = "lm";
  const std::string_view view = "view";
  LogEvent(spdlog::level::info, "kinds",
           {{"count", count}, {"small", small}, {"ratio", ratio}, {"name", name}, {"view", view}});
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0]["count"].is_number_integer());
  EXPECT_TRUE(lines[0]["small"].is_number_integer());
  EXPECT_TRUE(lines[0]["ratio"].is_number_float());
  EXPECT_EQ(lines[0]["name"], "lm");  // not `true`: a pointer must not become a bool
  EXPECT_EQ(lines[0]["view"], "view");
}

// The "threadsafe" style re-executes the test binary for the statement, so it
// runs in a process where InitLogging has never been called.
TEST(ServerLogDefaultsTest, EventsBeforeInitLoggingArePlainInfoOnStderr) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        LogEvent(spdlog::level::debug, "hidden");
        LogEvent(spdlog::level::info, "early", {{"model", "lm"}});
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), R"(^\[[-0-9T:.Z]+\] \[info\] early model=lm
$)");
}

RequestLogEntry FinishedRequest() {
  RequestLogEntry entry;
  entry.request_id = "req-1";
  entry.model = "lm";
  entry.method = "GenerateStream";
  entry.status = "OK";
  entry.finish_reason = "length";
  entry.peer = "ipv4:127.0.0.1:5000";
  entry.prompt_tokens = 12;
  entry.generated_tokens = 32;
  entry.queue_seconds = 0.001;
  entry.ttft_seconds = 0.02;
  entry.duration_seconds = 0.5;
  return entry;
}

TEST_F(ServerLogTest, RequestIsOneJsonLineWithTypedFields) {
  Init("json", "info");
  LogRequest(FinishedRequest());
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json& line = lines[0];
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["msg"], "request");
  EXPECT_EQ(line["request_id"], "req-1");
  EXPECT_EQ(line["model"], "lm");
  EXPECT_EQ(line["method"], "GenerateStream");
  EXPECT_EQ(line["status"], "OK");
  EXPECT_EQ(line["finish_reason"], "length");
  EXPECT_EQ(line["peer"], "ipv4:127.0.0.1:5000");
  ASSERT_TRUE(line["prompt_tokens"].is_number_integer());
  EXPECT_EQ(line["prompt_tokens"], 12);
  ASSERT_TRUE(line["generated_tokens"].is_number_integer());
  EXPECT_EQ(line["generated_tokens"], 32);
  ASSERT_TRUE(line["queue_seconds"].is_number_float());
  EXPECT_DOUBLE_EQ(line["queue_seconds"].get<double>(), 0.001);
  ASSERT_TRUE(line["ttft_seconds"].is_number_float());
  EXPECT_DOUBLE_EQ(line["ttft_seconds"].get<double>(), 0.02);
  ASSERT_TRUE(line["duration_seconds"].is_number_float());
  EXPECT_DOUBLE_EQ(line["duration_seconds"].get<double>(), 0.5);
  EXPECT_FALSE(line.contains("error"));
}

TEST_F(ServerLogTest, RequestLeavesOutWhatDidNotHappen) {
  Init("json", "info");
  RequestLogEntry entry;
  entry.request_id = "req-2";
  entry.model = "enc";
  entry.method = "Embed";
  entry.status = "OK";
  LogRequest(entry);
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_FALSE(lines[0].contains("ttft_seconds"));
  EXPECT_FALSE(lines[0].contains("finish_reason"));
  EXPECT_FALSE(lines[0].contains("peer"));
  EXPECT_TRUE(lines[0].contains("prompt_tokens"));
  EXPECT_TRUE(lines[0].contains("duration_seconds"));
}

TEST_F(ServerLogTest, RequestLevelFollowsTheStatus) {
  EXPECT_EQ(RequestLogLevel("OK"), spdlog::level::info);
  EXPECT_EQ(RequestLogLevel("CANCELLED"), spdlog::level::info);
  EXPECT_EQ(RequestLogLevel("DEADLINE_EXCEEDED"), spdlog::level::info);
  EXPECT_EQ(RequestLogLevel("INVALID_ARGUMENT"), spdlog::level::warn);
  EXPECT_EQ(RequestLogLevel("RESOURCE_EXHAUSTED"), spdlog::level::warn);
  EXPECT_EQ(RequestLogLevel("UNAVAILABLE"), spdlog::level::warn);
  EXPECT_EQ(RequestLogLevel("INTERNAL"), spdlog::level::err);
  EXPECT_EQ(RequestLogLevel("UNKNOWN"), spdlog::level::err);

  Init("json", "info");
  RequestLogEntry entry = FinishedRequest();
  entry.status = "RESOURCE_EXHAUSTED";
  entry.error_message = "no free slot for \"lm\"";
  entry.ttft_seconds.reset();
  LogRequest(entry);
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["level"], "warn");
  EXPECT_EQ(lines[0]["error"], "no free slot for \"lm\"");
}

TEST_F(ServerLogTest, RequestInPlainFormat) {
  Init("plain", "info");
  LogRequest(FinishedRequest());
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("[info] request request_id=req-1 method=GenerateStream model=lm "
                          "status=OK finish_reason=length prompt_tokens=12 generated_tokens=32 "
                          "queue_seconds=0.001 ttft_seconds=0.02 duration_seconds=0.5 "
                          "peer=ipv4:127.0.0.1:5000"),
            std::string::npos)
      << lines[0];
}

TEST_F(ServerLogTest, EngineEventNamesEventAndModelFirst) {
  Init("json", "debug");
  LogEngineEvent("load", "lm", {{"load_seconds", 1.5}, {"capacity", 64}});
  LogEngineEvent("drain", "lm", {}, spdlog::level::warn);
  LogEngineEvent("step", "lm", {}, spdlog::level::trace);  // below the level
  EXPECT_EQ(KeysInOrder(Lines()[0]),
            (std::vector<std::string>{"ts", "level", "msg", "event", "model", "load_seconds",
                                      "capacity"}));
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["msg"], "engine");
  EXPECT_EQ(lines[0]["event"], "load");
  EXPECT_EQ(lines[0]["model"], "lm");
  EXPECT_EQ(lines[0]["capacity"], 64);
  EXPECT_EQ(lines[1]["event"], "drain");
  EXPECT_EQ(lines[1]["level"], "warn");
}

// Fields travel to the formatter through thread-local storage: concurrent
// events must neither interleave within a line nor swap fields.
TEST_F(ServerLogTest, ConcurrentEventsKeepTheirOwnFields) {
  Init("json", "info");
  constexpr int kThreads = 4;
  constexpr int kEvents = 200;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kEvents; ++i) {
        LogEvent(spdlog::level::info, "thread " + std::to_string(t), {{"thread", t}, {"i", i}});
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kEvents));
  std::vector<int> next(kThreads, 0);
  for (const nlohmann::json& line : lines) {
    const int t = line["thread"].get<int>();
    ASSERT_EQ(line["msg"], "thread " + std::to_string(t));
    EXPECT_EQ(line["i"].get<int>(), next[t]++);  // each thread's events stay in order
  }
}

}  // namespace
}  // namespace performer::server
