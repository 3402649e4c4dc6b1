#include "server/engine/state_signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

namespace performer::server {
namespace {

constexpr size_t kMagicBytes = sizeof(kSignatureMagic) - 1;
constexpr size_t kMacBytes = kSignatureBytes - kMagicBytes;
static_assert(kMagicBytes == 8, "the signature magic is 8 bytes");

std::string Mac(std::string_view key, std::string_view bytes) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), mac, &length);
  return std::string(reinterpret_cast<const char*>(mac), length);
}

bool HasSignature(std::string_view bytes) {
  return bytes.size() >= kSignatureBytes &&
         std::memcmp(bytes.data() + bytes.size() - kSignatureBytes, kSignatureMagic, kMagicBytes) ==
             0;
}

}  // namespace

std::string SignState(std::string_view key, std::string encoded) {
  if (key.empty()) return encoded;
  const std::string mac = Mac(key, encoded);
  encoded.append(kSignatureMagic, kMagicBytes);
  encoded += mac;
  return encoded;
}

absl::StatusOr<std::string_view> VerifyState(std::string_view key, std::string_view bytes) {
  const bool signed_bytes = HasSignature(bytes);
  const std::string_view state =
      signed_bytes ? bytes.substr(0, bytes.size() - kSignatureBytes) : bytes;
  if (key.empty()) return state;
  if (!signed_bytes) {
    return absl::InvalidArgumentError(
        "the state is not signed: this server imports only states this deployment exported "
        "(--state_signing_key_file)");
  }
  const std::string expected = Mac(key, state);
  if (expected.size() != kMacBytes ||
      CRYPTO_memcmp(expected.data(), bytes.data() + bytes.size() - kMacBytes, kMacBytes) != 0) {
    return absl::InvalidArgumentError(
        "the state's signature is not this deployment's (--state_signing_key_file): it was "
        "altered, or exported by a deployment with another key");
  }
  return state;
}

}  // namespace performer::server
