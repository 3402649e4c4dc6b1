// The bearer-token file format: entries, defaults, comments, and an error
// naming the line (never the token) for each malformed entry.
#include "server/security/token_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace performer::server {
namespace {

constexpr char kToken[] = "abcdefghijklmnop0123";  // 20 characters

TEST(TokenFileTest, ParsesTokensNamesAndPermissions) {
  const std::string text = std::string("# tokens\n\n") + kToken +
                           "\n"
                           "  tok-ABCDEFGHIJKLMNOP   batch-jobs   # the nightly batch\n"
                           "tok/ops+0123456789==\tops\tpriority,cancel_any\r\n"
                           "tok_admin_0123456789 root admin\n";
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(text);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].token, kToken);
  EXPECT_EQ((*entries)[0].caller.name, "line-3");  // no name: its line
  EXPECT_EQ((*entries)[0].caller.permissions, 0u);
  EXPECT_EQ((*entries)[1].token, "tok-ABCDEFGHIJKLMNOP");
  EXPECT_EQ((*entries)[1].caller.name, "batch-jobs");
  EXPECT_FALSE((*entries)[1].caller.Has(Permission::kPriority));
  EXPECT_EQ((*entries)[2].token, "tok/ops+0123456789==");
  EXPECT_EQ((*entries)[2].caller.name, "ops");
  EXPECT_TRUE((*entries)[2].caller.Has(Permission::kPriority));
  EXPECT_TRUE((*entries)[2].caller.Has(Permission::kCancelAny));
  EXPECT_EQ((*entries)[3].caller.permissions, kAllPermissions);
}

TEST(TokenFileTest, AnEmptyFileHasNoTokens) {
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile("# none yet\n\n");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST(TokenFileTest, NamesMayRepeatForRotation) {
  const std::string text = "old-token-0123456789 app\nnew-token-0123456789 app\n";
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(text);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ((*entries)[0].caller.name, (*entries)[1].caller.name);
}

struct BadEntry {
  std::string text;
  std::string message;  // a part of the error
};

TEST(TokenFileTest, MalformedEntriesNameTheLineButNotTheToken) {
  const std::string secret = "s3cret-s3cret-s3cret";
  const BadEntry cases[] = {
      {"# ok\nshort", "line 2: the token has 5 characters"},
      {"tok*en-0123456789abcdef", "line 1: the token has a character outside"},
      {"=leading-equals-0123456789", "line 1: the token has a character outside"},
      {secret + " a\n" + secret + " b", "line 2: the same token appears on an earlier line"},
      {secret + " a b c", "line 1: too many fields"},
      {secret + " bad/name", "line 1: the name \"bad/name\""},
      {secret + " app superuser", "line 1: unknown permission \"superuser\""},
      {secret + " app priority,", "line 1: unknown permission \"\""},
  };
  for (const BadEntry& bad : cases) {
    absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(bad.text);
    ASSERT_FALSE(entries.ok()) << bad.text;
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(entries.status().message());
    EXPECT_NE(message.find(bad.message), std::string::npos) << message;
    EXPECT_EQ(message.find(secret), std::string::npos) << "the error repeats the token";
  }
}

TEST(TokenFileTest, ReadTokenFileNamesTheFile) {
  const std::string missing = ::testing::TempDir() + "/no-such-token-file";
  absl::StatusOr<std::vector<TokenEntry>> entries = ReadTokenFile(missing);
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(entries.status().message()).find(missing), std::string::npos);

  const std::string path = ::testing::TempDir() + "/token-file-test-bad";
  std::ofstream(path) << "x\n";
  entries = ReadTokenFile(path);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(std::string(entries.status().message()).find(path + ", line 1"), std::string::npos)
      << entries.status();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace performer::server
