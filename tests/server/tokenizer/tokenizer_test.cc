#include "server/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "server/tokenizer/sentencepiece_model.h"
#include "tests/testing/remove_tree.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;

TEST(ByteTokenizerTest, RoundTripsAnyBytes) {
  std::unique_ptr<Tokenizer> t = MakeByteTokenizer();
  EXPECT_EQ(t->name(), "byte");
  EXPECT_EQ(t->vocab_size(), 256);
  const std::string text = "h\xc3\xa9llo \xe2\x82\xac\x00!";
  std::vector<int32_t> ids = *t->Encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xc3);
  EXPECT_EQ(t->Decode(ids), text);
  EXPECT_EQ(t->Decode({104, 300, -1, 105}), "hi");
}

TEST(Utf8Test, SanitizeReplacesEveryInvalidSequence) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(SanitizeUtf8("ok \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "ok \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b"),
            "a" + fffd + "b");                                             // never valid
  EXPECT_EQ(SanitizeUtf8("\x80"), fffd);                                   // stray continuation
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), fffd + fffd);                        // truncated
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), fffd + fffd);                        // overlong
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), fffd + fffd + fffd);             // surrogate
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // > U+10FFFF
}

TEST(Utf8Test, CompletePrefixHoldsBackSplitCharacters) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xe2"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xe2\x82"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xe2\x82\xac"), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("\xf0\x9f\x98"), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("\xf0\x9f\x98\x80"), 4u);
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

TEST(IncrementalDetokenizerTest, ByteLevelReleasesWholeCharacters) {
  std::unique_ptr<Tokenizer> t = MakeByteTokenizer();
  IncrementalDetokenizer d(*t);
  EXPECT_EQ(d.Push({'a'}), "a");
  EXPECT_EQ(d.Push({0xe2}), "");
  EXPECT_EQ(d.Push({0x82}), "");
  EXPECT_EQ(d.Push({0xac, 'b'}),
            "\xe2\x82\xac"
            "b");
  EXPECT_EQ(d.Push({0xe2}), "");
  EXPECT_EQ(d.Finish(), "\xe2");
  EXPECT_EQ(d.released(),
            "a\xe2\x82\xac"
            "b\xe2");
}

class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("performer_sp_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    std::ofstream corpus(*dir_ / "corpus.txt");
    for (int i = 0; i < 200; ++i) {
      corpus << "the quick brown fox jumps over the lazy dog " << i << "\n";
      corpus << "linear attention keeps a constant state per sequence\n";
    }
    corpus.close();
    const std::string error =
        TrainSentencePieceModel("--input=" + (*dir_ / "corpus.txt").string() +
                                " --model_prefix=" + (*dir_ / "tokenizer").string() +
                                " --vocab_size=60 --model_type=bpe --minloglevel=2");
    ASSERT_EQ(error, "");
  }
  static void TearDownTestSuite() {
    ::performer::testing::RemoveTree(*dir_);
    delete dir_;
  }
  static fs::path* dir_;
};
fs::path* SentencePieceTest::dir_ = nullptr;

TEST_F(SentencePieceTest, LoadsFromTokenizerJsonAndRoundTrips) {
  std::ofstream(*dir_ / "tokenizer.json")
      << R"({"type": "sentencepiece", "model": "tokenizer.model"})";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(dir_->string());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_NE(*t, nullptr);
  EXPECT_EQ((*t)->name(), "sentencepiece");
  EXPECT_EQ((*t)->vocab_size(), 60);
  const std::string text = "the lazy fox keeps a state";
  std::vector<int32_t> ids = *(*t)->Encode(text);
  EXPECT_LT(ids.size(), text.size());
  EXPECT_EQ((*t)->Decode(ids), text);
  // Streaming one id at a time gives the same text.
  IncrementalDetokenizer d(**t);
  std::string streamed;
  for (int32_t id : ids) streamed += d.Push({id});
  streamed += d.Finish();
  EXPECT_EQ(streamed, text);
  fs::remove(*dir_ / "tokenizer.json");
}

// The streaming contract on id sequences a model may emit but Encode never
// gives: runs of ids whose text alone is empty ("▁", controls), ids outside
// the vocabulary, pushed in chunks of any size. Streamed text lost spaces
// here when SentencePiece's leading-space rule saw a window of such ids
// without the text before it.
TEST_F(SentencePieceTest, StreamingGivesTheWholeDecodeForAnyIds) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded =
      LoadSentencePieceTokenizer((*dir_ / "tokenizer.model").string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& t = **loaded;
  std::vector<int32_t> empty_alone;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (t.Decode({id}).empty()) empty_alone.push_back(id);
  }
  ASSERT_GE(empty_alone.size(), 2u);  // at least "▁" and the controls
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any_id(-2, static_cast<int32_t>(t.vocab_size()) + 2);
  std::uniform_int_distribution<size_t> empty_id(0, empty_alone.size() - 1);
  for (int sequence = 0; sequence < 2000; ++sequence) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (int32_t& id : ids) id = rng() % 2 ? empty_alone[empty_id(rng)] : any_id(rng);
    IncrementalDetokenizer d(t);
    std::string streamed;
    for (size_t at = 0; at < ids.size();) {
      const size_t n = 1 + rng() % std::min<size_t>(4, ids.size() - at);
      streamed += d.Push(std::vector<int32_t>(ids.begin() + at, ids.begin() + at + n));
      at += n;
    }
    streamed += d.Finish();
    ASSERT_EQ(streamed, t.Decode(ids)) << "sequence " << sequence;
    ASSERT_EQ(d.released(), streamed);
  }
}

TEST(IncrementalDetokenizerTest, HoldsBackAReplacementCharacterUntilTheNextId) {
  std::unique_ptr<Tokenizer> t = MakeByteTokenizer();
  IncrementalDetokenizer d(*t);
  EXPECT_EQ(d.Push({'a', 0xef, 0xbf, 0xbd}), "");
  EXPECT_EQ(d.Push({'b'}),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(d.Push({0xef, 0xbf, 0xbd}), "");
  EXPECT_EQ(d.Finish(), "\xef\xbf\xbd");
}

TEST(LoadTokenizerTest, FolderWithoutTokenizerAndBadFiles) {
  const fs::path dir = fs::temp_directory_path() / ("performer_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  absl::StatusOr<std::unique_ptr<Tokenizer>> none = LoadTokenizer(dir.string());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  std::ofstream(dir / "tokenizer.json") << R"({"type": "byte"})";
  EXPECT_EQ((*LoadTokenizer(dir.string()))->name(), "byte");
  std::ofstream(dir / "tokenizer.json") << R"({"type": "wordpiece"})";
  absl::Status bad = LoadTokenizer(dir.string()).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("unknown tokenizer type \"wordpiece\""), std::string::npos) << bad;
  std::ofstream(dir / "tokenizer.json") << R"({"type": "sentencepiece", "model": "missing.model"})";
  EXPECT_FALSE(LoadTokenizer(dir.string()).ok());
  ::performer::testing::RemoveTree(dir);
}

// Hostile tokenizer files are errors naming the file, never an exception
// (a non-string "model" once threw out of the loader) or a hang.
TEST(LoadTokenizerTest, HostileFilesAreErrors) {
  const fs::path dir =
      fs::temp_directory_path() / ("performer_tok_hostile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"type": "sentencepiece", "model": 7})";
  absl::Status s = LoadTokenizer(dir.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"model\" must be a file name, got 7"), std::string::npos) << s;
  std::ofstream(dir / "tokenizer.json") << "{\"type\": [" << std::string(1000, '[');
  s = LoadTokenizer(dir.string()).status();
  EXPECT_NE(s.message().find("tokenizer.json"), std::string::npos) << s;
  fs::remove(dir / "tokenizer.json");
  ASSERT_EQ(mkfifo((dir / "tokenizer.json").c_str(), 0600), 0);
  s = LoadTokenizer(dir.string()).status();
  EXPECT_NE(s.message().find("tokenizer.json: is a FIFO, not a regular file"), std::string::npos)
      << s;
  fs::remove(dir / "tokenizer.json");
  ASSERT_EQ(mkfifo((dir / "tokenizer.model").c_str(), 0600), 0);
  s = LoadTokenizer(dir.string()).status();
  EXPECT_NE(s.message().find("tokenizer.model: is a FIFO, not a regular file"), std::string::npos)
      << s;
  ::performer::testing::RemoveTree(dir);
}

}  // namespace
}  // namespace performer::server
