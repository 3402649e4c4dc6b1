#include "core/decoding/state_encoding.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace performer::decoding {
namespace {

constexpr char kMagic[8] = {'P', 'F', 'S', 'T', 'A', 'T', 'E', '\0'};

// Little-endian append (the hosts we run on are little-endian; the static
// assert keeps it so).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the state encoding assumes little-endian");

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void PutString(std::string& out, const std::string& s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Reads with every length checked against what is left.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  bool Get(T& value) {
    if (bytes_.size() - offset_ < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return true;
  }
  bool GetBytes(size_t count, std::string_view& out) {
    if (bytes_.size() - offset_ < count) return false;
    out = bytes_.substr(offset_, count);
    offset_ += count;
    return true;
  }
  bool GetString(std::string& out, size_t max_length) {
    uint32_t length = 0;
    std::string_view view;
    if (!Get(length) || length > max_length || !GetBytes(length, view)) return false;
    out.assign(view);
    return true;
  }
  size_t left() const { return bytes_.size() - offset_; }

 private:
  std::string_view bytes_;
  size_t offset_ = 0;
};

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("state data is malformed: ", what));
}

constexpr size_t kMaxNameBytes = 4096;

// At most kQuotedBytes of `text`, C-escaped, and its length when cut: how
// an error message quotes a name read from the bytes.
constexpr size_t kQuotedBytes = 64;
std::string Quoted(std::string_view text) {
  const std::string shown =
      absl::CEscape(absl::string_view(text.data(), std::min(text.size(), kQuotedBytes)));
  return text.size() <= kQuotedBytes ? shown : absl::StrCat(shown, "... (", text.size(), " bytes)");
}

constexpr uint32_t kMaxRank = 8;

}  // namespace

uint64_t Fnv1a64(std::string_view bytes, uint64_t seed) {
  uint64_t hash = seed;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string HexDigest(uint64_t value) { return absl::StrFormat("%016x", value); }

absl::StatusOr<std::string> EncodeState(const ModelFingerprint& fingerprint,
                                        const EncodedState& state) {
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kStateEncodingVersion);
  PutString(out, fingerprint.model);
  PutString(out, fingerprint.config_hash);
  PutString(out, fingerprint.weights_hash);
  Put<int64_t>(out, state.snapshot.position);
  if (state.snapshot.position < 0 ||
      static_cast<int64_t>(state.tokens.size()) < state.snapshot.position) {
    return absl::InvalidArgumentError(absl::StrCat("a state at position ", state.snapshot.position,
                                                   " with ", state.tokens.size(), " tokens"));
  }
  Put<uint32_t>(out, static_cast<uint32_t>(state.tokens.size()));
  for (int64_t token : state.tokens) Put<int64_t>(out, token);
  Put<uint32_t>(out, static_cast<uint32_t>(state.snapshot.layers.size()));
  for (const std::vector<torch::Tensor>& tensors : state.snapshot.layers) {
    Put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
    for (const torch::Tensor& t : tensors) {
      uint8_t dtype = 0;
      if (t.scalar_type() == torch::kFloat) {
        dtype = 0;
      } else if (t.scalar_type() == torch::kDouble) {
        dtype = 1;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot encode a state tensor of dtype ", c10::toString(t.scalar_type())));
      }
      Put<uint8_t>(out, dtype);
      Put<uint32_t>(out, static_cast<uint32_t>(t.dim()));
      for (int64_t size : t.sizes()) Put<int64_t>(out, size);
      const torch::Tensor host = t.to(torch::kCPU).contiguous();
      out.append(static_cast<const char*>(host.data_ptr()),
                 static_cast<size_t>(host.numel()) * host.element_size());
    }
  }
  Put<uint64_t>(out, Fnv1a64(out));
  return out;
}

absl::StatusOr<EncodedState> DecodeState(std::string_view bytes, const ModelFingerprint& expected,
                                         int64_t max_bytes) {
  if (bytes.size() < sizeof(kMagic) + sizeof(uint64_t)) return Malformed("too short");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Malformed("it does not start with the state magic");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - sizeof(uint64_t));
  uint64_t checksum = 0;
  std::memcpy(&checksum, bytes.data() + body.size(), sizeof(checksum));
  if (checksum != Fnv1a64(body)) return Malformed("checksum mismatch (corrupted or truncated)");

  Reader in(body.substr(sizeof(kMagic)));
  uint32_t version = 0;
  if (!in.Get(version)) return Malformed("no version");
  if (version != kStateEncodingVersion) {
    return Malformed(
        absl::StrCat("version ", version, "; this server reads version ", kStateEncodingVersion));
  }
  ModelFingerprint fingerprint;
  if (!in.GetString(fingerprint.model, kMaxNameBytes) ||
      !in.GetString(fingerprint.config_hash, kMaxNameBytes) ||
      !in.GetString(fingerprint.weights_hash, kMaxNameBytes)) {
    return Malformed("bad model fingerprint");
  }
  if (!(fingerprint == expected)) {
    // The state's names are the sender's bytes: quoted bounded and escaped.
    return absl::FailedPreconditionError(
        absl::StrCat("the state belongs to model '", Quoted(fingerprint.model), "' (config ",
                     Quoted(fingerprint.config_hash), ", weights ",
                     Quoted(fingerprint.weights_hash), "), not to '", expected.model, "' (config ",
                     expected.config_hash, ", weights ", expected.weights_hash, ")"));
  }
  EncodedState state;
  uint32_t seen = 0;
  if (!in.Get(state.snapshot.position) || !in.Get(seen) || seen > in.left() / sizeof(int64_t) ||
      state.snapshot.position < 0 || state.snapshot.position > static_cast<int64_t>(seen)) {
    return Malformed("bad position or tokens");
  }
  state.tokens.resize(seen);
  for (int64_t& token : state.tokens) in.Get(token);
  uint32_t layers = 0;
  if (!in.Get(layers) || layers > in.left() / sizeof(uint32_t)) return Malformed("bad layer count");
  int64_t data_bytes = 0;
  for (uint32_t i = 0; i < layers; ++i) {
    uint32_t count = 0;
    if (!in.Get(count) || count > in.left()) return Malformed("bad tensor count");
    std::vector<torch::Tensor> tensors;
    for (uint32_t j = 0; j < count; ++j) {
      uint8_t dtype = 0;
      uint32_t rank = 0;
      if (!in.Get(dtype) || dtype > 1 || !in.Get(rank) || rank > kMaxRank) {
        return Malformed(absl::StrCat("bad dtype or rank of tensor ", j, " of layer ", i));
      }
      std::vector<int64_t> sizes(rank);
      int64_t elements = 1;
      for (int64_t& size : sizes) {
        if (!in.Get(size) || size < 0 ||
            (size > 0 && elements > std::numeric_limits<int64_t>::max() / size)) {
          return Malformed(absl::StrCat("bad shape of tensor ", j, " of layer ", i));
        }
        elements *= size;
      }
      const int64_t element_size = dtype == 0 ? 4 : 8;
      if (elements > (max_bytes - data_bytes) / element_size) {
        return Malformed(absl::StrCat("more than ", max_bytes, " bytes of tensor data"));
      }
      std::string_view data;
      if (!in.GetBytes(static_cast<size_t>(elements * element_size), data)) {
        return Malformed(absl::StrCat("tensor ", j, " of layer ", i, " is cut short"));
      }
      data_bytes += elements * element_size;
      torch::Tensor t = torch::empty(sizes, dtype == 0 ? torch::kFloat : torch::kDouble);
      std::memcpy(t.data_ptr(), data.data(), data.size());
      // No model state holds a NaN or an infinity: one that does was forged
      // (the checksum is unkeyed) and would decode to garbage.
      if (!torch::isfinite(t).all().item<bool>()) {
        return Malformed(absl::StrCat("tensor ", j, " of layer ", i,
                                      " holds a non-finite value (NaN or infinity)"));
      }
      tensors.push_back(std::move(t));
    }
    state.snapshot.layers.push_back(std::move(tensors));
  }
  if (in.left() != 0) return Malformed(absl::StrCat(in.left(), " bytes after the state"));
  return state;
}

}  // namespace performer::decoding
