#include "server/server_config.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"

namespace performer::server {
namespace {

// Sets flags by name, as the command line would, for one test: the saver
// puts every flag back when the test ends.
class ServerConfigTest : public ::testing::Test {
 protected:
  void Set(const std::string& name, const std::string& value) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    ASSERT_NE(flag, nullptr) << "no flag --" << name;
    std::string error;
    ASSERT_TRUE(flag->ParseFrom(value, &error)) << "--" << name << "=" << value << ": " << error;
  }

  // The message ServerConfigFromFlags refuses the flags with ("" if it
  // accepts them).
  std::string Refusal() {
    const absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
    if (config.ok()) return "";
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
    return std::string(config.status().message());
  }

 private:
  absl::FlagSaver saver_;
};

TEST_F(ServerConfigTest, DefaultsAreValid) {
  const absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->grpc.port, 50051);
  EXPECT_EQ(config->grpc.health_port, -1);
  EXPECT_EQ(config->metrics.port, 9464);
  EXPECT_EQ(config->repository.device, "cpu");
  EXPECT_EQ(config->stream_buffer_tokens, 1024);
  EXPECT_EQ(config->liveness_stall, absl::Seconds(30));
  EXPECT_FALSE(config->security.tls_on());
  EXPECT_TRUE(config->repository.engine.prefix_cache.on_device);
  EXPECT_FALSE(config->cuda_same_bits);
}

TEST_F(ServerConfigTest, FlagsReachTheirFields) {
  Set("max_batch", "7");
  Set("prefill_chunk_tokens", "64");
  Set("max_new_tokens_limit", "99");
  Set("session_ttl_seconds", "12");
  Set("state_spill_dir", "/tmp/spill");
  Set("keepalive_time_ms", "1234");
  Set("metrics_host", "0.0.0.0");
  Set("auth_tokens_file", "/tmp/tokens");
  Set("drain_timeout", "3s");
  Set("token_count_buckets", "1,2,4");
  Set("cuda_same_bits", "true");
  const absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->repository.max_batch, 7);
  EXPECT_EQ(config->repository.engine.prefill_chunk_tokens, 64);
  EXPECT_EQ(config->repository.engine.request_bounds.max_new_tokens, 99);
  EXPECT_EQ(config->repository.engine.sessions.ttl, absl::Seconds(12));
  EXPECT_EQ(config->repository.engine.sessions.spill_dir, "/tmp/spill");
  EXPECT_EQ(config->grpc.keepalive_time_ms, 1234);
  EXPECT_EQ(config->metrics.host, "0.0.0.0");
  EXPECT_EQ(config->security.auth_tokens_file, "/tmp/tokens");
  EXPECT_EQ(config->drain_timeout, absl::Seconds(3));
  EXPECT_EQ(config->metrics.buckets.token_counts, (std::vector<double>{1, 2, 4}));
  EXPECT_TRUE(config->cuda_same_bits);
}

TEST_F(ServerConfigTest, PrefixCacheIntervalDefaultsToTheChunkSize) {
  Set("prefill_chunk_tokens", "128");
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->repository.engine.prefix_cache.interval_tokens, 128);
  Set("prefix_cache_interval_tokens", "384");
  config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->repository.engine.prefix_cache.interval_tokens, 384);
}

// Each bound, by the flag's value just outside it; the message names the
// flag and the value.
TEST_F(ServerConfigTest, EveryBoundIsChecked) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"max_batch", "0"},
      {"state_memory_bytes", "0"},
      {"max_queue", "-1"},
      {"prefill_chunk_tokens", "0"},
      {"max_prefills_per_step", "0"},
      {"stream_messages_per_step", "-1"},
      {"prefix_cache_bytes", "-1"},
      {"session_bytes", "-1"},
      {"max_new_tokens_limit", "0"},
      {"max_request_id_bytes", "0"},
      {"max_stop_strings", "-1"},
      {"max_stop_string_bytes", "0"},
      {"max_stop_token_ids", "-1"},
      {"max_prompt_bytes", "0"},
      {"max_concurrent_streams", "0"},
      {"grpc_max_threads", "-1"},
      {"keepalive_time_ms", "0"},
      {"keepalive_timeout_ms", "0"},
      {"keepalive_min_client_ping_ms", "-1"},
      {"credentials_reload_seconds", "0"},
      {"stream_buffer_tokens", "0"},
      {"intra_op_threads", "-1"},
  };
  for (const auto& [flag, value] : cases) {
    SCOPED_TRACE(absl::StrCat("--", flag, "=", value));
    absl::FlagSaver restore;
    Set(flag, value);
    const std::string refusal = Refusal();
    EXPECT_NE(refusal.find(absl::StrCat("--", flag, " must be at least")), std::string::npos)
        << refusal;
    EXPECT_NE(refusal.find(absl::StrCat("got ", value)), std::string::npos) << refusal;
  }
}

TEST_F(ServerConfigTest, TheStreamIntervalAndTheIoNiceAreBounded) {
  Set("stream_interval", "8");
  Set("io_thread_nice", "5");
  Set("stream_messages_per_step", "16");
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->stream_interval, 8);
  EXPECT_EQ(config->repository.engine.stream_messages_per_step, 16);
  EXPECT_EQ(config->io_thread_nice, 5);
  for (const char* interval : {"0", "1025"}) {
    absl::FlagSaver restore;
    Set("stream_interval", interval);
    const std::string refusal = Refusal();
    EXPECT_NE(refusal.find("--stream_interval=" + std::string(interval) +
                           " must be from 1 to --stream_buffer_tokens (1024)"),
              std::string::npos)
        << refusal;
  }
  for (const char* nice : {"-1", "20"}) {
    absl::FlagSaver restore;
    Set("io_thread_nice", nice);
    const std::string refusal = Refusal();
    EXPECT_NE(refusal.find("--io_thread_nice=" + std::string(nice) + " is not from 0 to 19"),
              std::string::npos)
        << refusal;
  }
}

TEST_F(ServerConfigTest, PortsAreTcpPorts) {
  for (const std::string flag : {"port", "health_port", "metrics_port"}) {
    SCOPED_TRACE(flag);
    for (const std::string value : {"70000", "65536", "-2"}) {
      absl::FlagSaver restore;
      Set(flag, value);
      const std::string refusal = Refusal();
      EXPECT_NE(refusal.find(absl::StrCat("--", flag, " must be 0 (a free port) to 65535")),
                std::string::npos)
          << refusal;
    }
    absl::FlagSaver restore;
    Set(flag, "65535");
    EXPECT_EQ(Refusal(), "");
  }
  // -1 turns the health and metrics listeners off, but the gRPC port is
  // always there.
  {
    absl::FlagSaver restore;
    Set("port", "-1");
    EXPECT_NE(Refusal().find("--port must be"), std::string::npos);
  }
  Set("health_port", "-1");
  Set("metrics_port", "-1");
  EXPECT_EQ(Refusal(), "");
}

TEST_F(ServerConfigTest, HostMustNameAnAddress) {
  Set("host", "");
  EXPECT_EQ(Refusal(), "--host must name an address");
  Set("host", "::1");
  EXPECT_EQ(Refusal(), "");
}

TEST_F(ServerConfigTest, MaxMessageBytesFitsGrpcsInt) {
  Set("max_message_bytes", "4294967296");
  EXPECT_NE(Refusal().find("--max_message_bytes must be 1 to 2147483647, got 4294967296"),
            std::string::npos);
  Set("max_message_bytes", "0");
  EXPECT_NE(Refusal().find("--max_message_bytes must be 1 to"), std::string::npos);
  Set("max_message_bytes", "2147483647");
  EXPECT_EQ(Refusal(), "");
}

TEST_F(ServerConfigTest, DurationsMustBePositive) {
  {
    absl::FlagSaver restore;
    Set("liveness_stall_seconds", "0");
    EXPECT_NE(Refusal().find("--liveness_stall_seconds must be positive"), std::string::npos);
  }
  {
    absl::FlagSaver restore;
    Set("session_ttl_seconds", "0");
    EXPECT_NE(Refusal().find("--session_ttl_seconds must be at least 1"), std::string::npos);
  }
  Set("drain_timeout", "-1s");
  EXPECT_NE(Refusal().find("--drain_timeout must not be negative"), std::string::npos);
}

TEST_F(ServerConfigTest, PrefixCacheIntervalIsAMultipleOfTheChunk) {
  Set("prefill_chunk_tokens", "64");
  Set("prefix_cache_interval_tokens", "100");
  const std::string refusal = Refusal();
  EXPECT_NE(refusal.find("--prefix_cache_interval_tokens must be a positive multiple of "
                         "--prefill_chunk_tokens (64), got 100"),
            std::string::npos)
      << refusal;
  Set("prefix_cache_interval_tokens", "-64");
  EXPECT_NE(Refusal().find("--prefix_cache_interval_tokens"), std::string::npos);
}

TEST_F(ServerConfigTest, TlsFilesGoTogether) {
  {
    absl::FlagSaver restore;
    Set("tls_cert_file", "/tmp/cert.pem");
    EXPECT_EQ(Refusal(), "--tls_cert_file and --tls_key_file go together");
  }
  {
    absl::FlagSaver restore;
    Set("tls_key_file", "/tmp/key.pem");
    EXPECT_EQ(Refusal(), "--tls_cert_file and --tls_key_file go together");
  }
  Set("tls_client_ca_file", "/tmp/ca.pem");
  EXPECT_EQ(Refusal(), "--tls_client_ca_file needs --tls_cert_file and --tls_key_file");
  Set("tls_cert_file", "/tmp/cert.pem");
  Set("tls_key_file", "/tmp/key.pem");
  // The files themselves are read at the start, not here.
  const absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->security.tls_on());
}

TEST_F(ServerConfigTest, SessionPeersAndPersistAreChecked) {
  {
    absl::FlagSaver restore;
    Set("session_persist", "true");
    EXPECT_EQ(Refusal(), "--session_persist needs --state_spill_dir, the folder it writes to");
    Set("state_spill_dir", "/tmp/spill");
    EXPECT_EQ(Refusal(), "");
  }
  for (const char* bad :
       {"replica-a", "replica-a:0", "replica-a:70000", ":50051", "[::1:50051", "dns:///peers"}) {
    absl::FlagSaver restore;
    Set("session_peers", absl::StrCat("replica-b:50051,", bad));
    EXPECT_NE(Refusal().find(absl::StrCat("--session_peers: \"", bad, "\" is not host:port")),
              std::string::npos)
        << bad;
  }
  {
    absl::FlagSaver restore;
    Set("session_peer_timeout", "0s");
    EXPECT_EQ(Refusal(), "--session_peer_timeout must be positive");
  }
  Set("session_peers", "10.0.0.1:50051,[fd00::2]:50051,dns:///performer-serve-peers:50051");
  Set("session_peer_token_file", "/etc/performer/peer-token");
  const absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->session_peers.peers.size(), 3u);
  EXPECT_EQ(config->session_peers.token_file, "/etc/performer/peer-token");
  EXPECT_EQ(config->session_peers.timeout, absl::Seconds(2));
}

TEST_F(ServerConfigTest, CallerSharesAreFractionsOfOne) {
  for (const char* flag : {"caller_slot_share", "caller_queue_share", "caller_session_share"}) {
    for (const char* bad : {"0", "-0.5", "1.5", "nan"}) {
      absl::FlagSaver restore;
      Set(flag, bad);
      EXPECT_NE(Refusal().find(absl::StrCat("--", flag, " must be in (0, 1]")), std::string::npos)
          << flag << "=" << bad;
    }
  }
  Set("caller_slot_share", "1");
  Set("caller_queue_share", "0.25");
  Set("caller_session_share", "0.125");
  const absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->repository.engine.caller_slot_share, 1.0);
  EXPECT_EQ(config->repository.engine.caller_queue_share, 0.25);
  EXPECT_EQ(config->repository.engine.caller_session_share, 0.125);
}

TEST_F(ServerConfigTest, HistogramBoundsAreParsed) {
  Set("request_seconds_buckets", "0.1,oops");
  const absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("--request_seconds_buckets"), std::string::npos)
      << config.status();
}

TEST_F(ServerConfigTest, DeviceIsChecked) {
  Set("device", "tpu");
  const absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("tpu"), std::string::npos) << config.status();
}

TEST(GrpcConfigTest, AddressBracketsIpv6Literals) {
  GrpcConfig grpc;
  grpc.host = "0.0.0.0";
  EXPECT_EQ(grpc.Address(50051), "0.0.0.0:50051");
  grpc.host = "localhost";
  EXPECT_EQ(grpc.Address(1), "localhost:1");
  grpc.host = "::1";
  EXPECT_EQ(grpc.Address(50051), "[::1]:50051");
  grpc.host = "[::1]";
  EXPECT_EQ(grpc.Address(50051), "[::1]:50051");
  grpc.host = "::";
  EXPECT_EQ(grpc.Address(0), "[::]:0");
}

TEST(LogConfigTest, ReadsTheLogFlags) {
  absl::FlagSaver restore;
  std::string error;
  ASSERT_TRUE(absl::FindCommandLineFlag("log_format")->ParseFrom("json", &error)) << error;
  EXPECT_EQ(LogConfigFromFlags().format, "json");
  EXPECT_EQ(LogConfigFromFlags().level, "info");
}

}  // namespace
}  // namespace performer::server
