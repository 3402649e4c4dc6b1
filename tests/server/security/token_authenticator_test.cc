// Bearer-token checks (TokenAuthenticator), the metrics token (SecretToken)
// and their reloads: a reload swaps the tokens, a bad file keeps them.
#include "server/security/token_authenticator.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "server/security/secret_token.h"

namespace performer::server {
namespace {

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kRoot[] = "root-token-0123456789";

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abcdef", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcdeF"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcde"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcdefabcdef"));  // a repeat is not a match
  EXPECT_FALSE(ConstantTimeEquals("abcdef", ""));
  EXPECT_FALSE(ConstantTimeEquals("", ""));  // no token matches an empty secret
}

TEST(TokenAuthenticatorTest, AcceptsOnlyABearerTokenOfTheFile) {
  absl::StatusOr<std::vector<TokenEntry>> entries =
      ParseTokenFile(std::string(kAlice) + " alice\n" + kRoot + " root admin\n");
  ASSERT_TRUE(entries.ok()) << entries.status();
  TokenAuthenticator tokens(*entries);

  absl::StatusOr<Caller> alice = tokens.Authenticate(std::string("Bearer ") + kAlice);
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->permissions, 0u);
  // The scheme is case-insensitive; spaces around the token do not count.
  absl::StatusOr<Caller> root = tokens.Authenticate(std::string("bearer  ") + kRoot + " ");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->name, "root");
  EXPECT_TRUE(root->Has(Permission::kCancelAny));

  for (const std::string& bad :
       {std::string(""), std::string(kAlice), std::string("Basic ") + kAlice,
        std::string("Bearer "), std::string("Bearer wrong-token-0123456789"),
        std::string("Bearer ") + kAlice + "x"}) {
    absl::StatusOr<Caller> caller = tokens.Authenticate(bad);
    ASSERT_FALSE(caller.ok()) << bad;
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_EQ(std::string(caller.status().message()).find(kAlice), std::string::npos);
  }
  EXPECT_EQ(tokens.names(), (std::vector<std::string>{"alice", "root"}));
}

TEST(TokenAuthenticatorTest, ReloadSwapsTheTokensAndABadFileKeepsThem) {
  const std::string path = WriteFile("authenticator-reload", std::string(kAlice) + " alice\n");
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> tokens = TokenAuthenticator::FromFile(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_TRUE((*tokens)->Authenticate(std::string("Bearer ") + kAlice).ok());

  WriteFile("authenticator-reload", std::string(kRoot) + " root\n");
  ASSERT_TRUE((*tokens)->Reload().ok());
  EXPECT_FALSE((*tokens)->Authenticate(std::string("Bearer ") + kAlice).ok());
  EXPECT_TRUE((*tokens)->Authenticate(std::string("Bearer ") + kRoot).ok());

  WriteFile("authenticator-reload", "too-short\n");
  const absl::Status failed = (*tokens)->Reload();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*tokens)->Authenticate(std::string("Bearer ") + kRoot).ok()) << "kept";
  std::remove(path.c_str());
}

TEST(TokenAuthenticatorTest, FromFileRefusesAMalformedFile) {
  const std::string path = WriteFile("authenticator-bad", std::string(kAlice) + " a b c\n");
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> tokens = TokenAuthenticator::FromFile(path);
  ASSERT_FALSE(tokens.ok());
  EXPECT_NE(std::string(tokens.status().message()).find("line 1"), std::string::npos);
  std::remove(path.c_str());
}

TEST(SecretTokenTest, HoldsExactlyOneTokenAndReloads) {
  const std::string path = WriteFile("secret-token", std::string("# scrape\n") + kAlice + "\n");
  absl::StatusOr<std::unique_ptr<SecretToken>> token = SecretToken::FromFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_TRUE((*token)->Matches(kAlice));
  EXPECT_FALSE((*token)->Matches(kRoot));
  EXPECT_FALSE((*token)->Matches(""));

  WriteFile("secret-token", std::string(kAlice) + "\n" + kRoot + "\n");
  const absl::Status two = (*token)->Reload();
  EXPECT_EQ(two.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(two.message()).find("exactly one"), std::string::npos) << two;
  EXPECT_TRUE((*token)->Matches(kAlice)) << "a failed reload keeps the token";

  WriteFile("secret-token", std::string(kRoot) + "\n");
  ASSERT_TRUE((*token)->Reload().ok());
  EXPECT_TRUE((*token)->Matches(kRoot));
  EXPECT_FALSE((*token)->Matches(kAlice));

  WriteFile("secret-token", "");
  EXPECT_FALSE(SecretToken::FromFile(path).ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace performer::server
