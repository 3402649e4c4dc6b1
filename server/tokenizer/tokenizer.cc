#include "server/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/io/bounded_file.h"
#include "server/tokenizer/sentencepiece_model.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;

// U+FFFD, which SentencePiece shows for bytes of a character not complete
// yet.
constexpr std::string_view kReplacementCharacter = "\xef\xbf\xbd";

// Whether `text` may still change when more ids follow: it ends inside a
// UTF-8 character or on U+FFFD.
bool MayChange(const std::string& text) {
  if (CompleteUtf8Prefix(text) != text.size()) return true;
  return text.size() >= kReplacementCharacter.size() &&
         text.compare(text.size() - kReplacementCharacter.size(), kReplacementCharacter.size(),
                      kReplacementCharacter) == 0;
}

// Byte-level: id = byte value, 256 tokens.
class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
    }
    return out;
  }
  // Bytes decode the same in any context.
  std::string DecodeContinuation(const std::vector<int32_t>& ids) const override {
    return Decode(ids);
  }
};

// SentencePiece drops the leading "▁" (space) of a piece while the text
// decoded before it is empty (in some versions: of the first such piece
// only), and merges byte pieces into characters. A continuation is
// therefore decoded behind an anchor: one piece whose text is not empty and
// does not merge with what follows (the piece for "a", found at load), whose
// own text is then cut off.
class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model)
      : model_(std::move(model)), anchor_(FindAnchor()) {}
  std::string name() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return model_->vocab_size(); }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int> ids;
    std::string error;
    if (!model_->Encode(text, &ids, &error)) return absl::InvalidArgumentError(error);
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    std::vector<int> valid;
    for (int32_t id : ids) {
      if (id >= 0 && id < model_->vocab_size()) valid.push_back(id);
    }
    return model_->Decode(valid);
  }
  std::string DecodeContinuation(const std::vector<int32_t>& ids) const override {
    std::vector<int32_t> anchored;
    anchored.reserve(ids.size() + 1);
    anchored.push_back(anchor_.id);
    anchored.insert(anchored.end(), ids.begin(), ids.end());
    const std::string text = Decode(anchored);
    // FindAnchor checked that the anchor's text opens what follows it.
    return text.substr(std::min(anchor_.text_size, text.size()));
  }

 private:
  // A piece P with text t such that Decode({P, P}) == t + " " + t or t + t
  // (its text is whole and does not merge with the next piece): the piece
  // for "a" in any real vocabulary, else the first such id.
  struct Anchor {
    int32_t id = -1;  // -1 decodes to nothing: continuations then decode as Decode does
    size_t text_size = 0;
  };
  Anchor FindAnchor() const {
    const auto anchor = [this](int32_t id) -> std::optional<Anchor> {
      const std::string alone = Decode({id});
      if (alone.empty() || MayChange(alone)) return std::nullopt;
      const std::string twice = Decode({id, id});
      if (twice != alone + alone && twice != alone + " " + alone) return std::nullopt;
      return Anchor{id, alone.size()};
    };
    for (const char* letter : {"a", "e", "x", "0"}) {
      absl::StatusOr<std::vector<int32_t>> ids = Encode(letter);
      if (!ids.ok() || ids->size() != 1) continue;
      if (std::optional<Anchor> found = anchor((*ids)[0])) return *found;
    }
    for (int32_t id = 0; id < model_->vocab_size(); ++id) {
      if (std::optional<Anchor> found = anchor(id)) return *found;
    }
    return Anchor{};
  }

  std::unique_ptr<SentencePieceModel> model_;
  const Anchor anchor_;
};

}  // namespace

size_t CompleteUtf8Prefix(std::string_view text) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t n = text.size();
  size_t i = n;
  int continuation = 0;
  while (i > 0 && continuation < 4) {
    const unsigned char c = static_cast<unsigned char>(text[i - 1]);
    if ((c & 0xC0) != 0x80) break;  // not a continuation byte
    --i;
    ++continuation;
  }
  if (i == 0) return n;  // only continuation bytes: nothing to wait for
  const unsigned char lead = static_cast<unsigned char>(text[i - 1]);
  int expected = 1;
  if ((lead & 0xE0) == 0xC0)
    expected = 2;
  else if ((lead & 0xF0) == 0xE0)
    expected = 3;
  else if ((lead & 0xF8) == 0xF0)
    expected = 4;
  if (expected > 1 && continuation + 1 < expected) return i - 1;
  return n;
}

std::string IncrementalDetokenizer::PendingText() const {
  return released_.empty() ? tokenizer_.Decode(pending_) : tokenizer_.DecodeContinuation(pending_);
}

std::string IncrementalDetokenizer::Push(const std::vector<int32_t>& ids) {
  pending_.insert(pending_.end(), ids.begin(), ids.end());
  std::string text = PendingText();
  if (text.empty() || MayChange(text)) return "";
  released_ += text;
  pending_.clear();
  return text;
}

std::string IncrementalDetokenizer::Finish() {
  std::string rest = PendingText();
  released_ += rest;
  pending_.clear();
  return rest;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = byte(i);
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // range of the second byte
    if (c < 0x80) {
      length = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;   // no overlong forms
      if (c == 0xED) high = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;   // no overlong forms
      if (c == 0xF4) high = 0x8F;  // nothing past U+10FFFF
    }
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) {
      const unsigned char b = byte(i + k);
      valid = k == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
    }
    if (valid) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD, replacing one byte
      ++i;
    }
  }
  return out;
}

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
  // SentencePiece reads the file itself: a FIFO would block it.
  if (absl::StatusOr<uint64_t> size = io::RegularFileSize(path, kMaxSentencePieceModelBytes);
      !size.ok()) {
    return size.status();
  }
  std::string error;
  std::unique_ptr<SentencePieceModel> model = LoadSentencePieceModel(path, &error);
  if (model == nullptr) return absl::InvalidArgumentError(absl::StrCat(path, ": ", error));
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(std::move(model)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path json_path = dir / "tokenizer.json";
  absl::StatusOr<nlohmann::json> parsed = io::ReadJsonFile(json_path.string());
  if (parsed.ok()) {
    const nlohmann::json& j = *parsed;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(json_path.string(), ": expected {\"type\": \"byte\" | \"sentencepiece\"}"));
    }
    const std::string type = j["type"].get<std::string>();
    if (type == "byte") return MakeByteTokenizer();
    if (type == "sentencepiece") {
      auto model = j.find("model");
      if (model != j.end() && !model->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            json_path.string(), ": \"model\" must be a file name, got ", model->dump()));
      }
      return LoadSentencePieceTokenizer(
          (dir / (model == j.end() ? "tokenizer.model" : model->get<std::string>())).string());
    }
    return absl::InvalidArgumentError(
        absl::StrCat(json_path.string(), ": unknown tokenizer type \"", type, "\""));
  }
  if (parsed.status().code() != absl::StatusCode::kNotFound) return parsed.status();
  if (fs::exists(dir / "tokenizer.model") || fs::is_symlink(dir / "tokenizer.model")) {
    return LoadSentencePieceTokenizer((dir / "tokenizer.model").string());
  }
  return std::unique_ptr<Tokenizer>();
}

}  // namespace performer::server
