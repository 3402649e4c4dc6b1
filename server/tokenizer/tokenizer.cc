#include "server/tokenizer/tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/io/bounded_file.h"
#include "server/tokenizer/sentencepiece_model.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;

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
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model)
      : model_(std::move(model)) {}
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

 private:
  std::unique_ptr<SentencePieceModel> model_;
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

std::string IncrementalDetokenizer::DecodeRange(size_t begin, size_t end) const {
  return tokenizer_.Decode(std::vector<int32_t>(ids_.begin() + static_cast<std::ptrdiff_t>(begin),
                                                ids_.begin() + static_cast<std::ptrdiff_t>(end)));
}

std::string IncrementalDetokenizer::Push(const std::vector<int32_t>& ids) {
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  const std::string before = DecodeRange(window_begin_, window_end_);
  const std::string text = DecodeRange(window_begin_, ids_.size());
  // Release only when the new text extends the old one and ends on a
  // complete UTF-8 character (SentencePiece may rewrite the last piece's
  // text; a character may be split over tokens).
  if (text.size() <= before.size() || text.compare(0, before.size(), before) != 0 ||
      CompleteUtf8Prefix(text) != text.size()) {
    return "";
  }
  std::string fresh = text.substr(before.size());
  released_ += fresh;
  window_begin_ = window_end_;
  window_end_ = ids_.size();
  return fresh;
}

std::string IncrementalDetokenizer::Finish() {
  const std::string before = DecodeRange(window_begin_, window_end_);
  const std::string text = DecodeRange(window_begin_, ids_.size());
  if (text.size() <= before.size() || text.compare(0, before.size(), before) != 0) return "";
  std::string rest = text.substr(before.size());
  released_ += rest;
  window_begin_ = window_end_ = ids_.size();
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
