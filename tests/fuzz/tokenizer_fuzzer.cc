// The tokenizers on arbitrary text and ids: the byte tokenizer round-trips
// any bytes; SentencePiece (a small model trained at start-up) encodes any
// text to ids inside its vocabulary; for both, incremental detokenization
// of the ids pushed in arbitrary chunks gives exactly Decode(all ids) (the
// contract in tokenizer.h); SanitizeUtf8 returns valid UTF-8 (a fixed
// point) and CompleteUtf8Prefix a prefix length. Ids outside the vocabulary
// decode to nothing.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "server/tokenizer/sentencepiece_model.h"
#include "server/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_file.h"

namespace {

using performer::server::Tokenizer;

std::unique_ptr<Tokenizer> TrainSentencePiece() {
  const std::string corpus = performer::fuzz::ScratchPath("corpus.txt");
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 200; ++i) {
      out << "the quick brown fox jumps over the lazy dog " << i << "\n";
      out << "linear attention keeps a constant state per sequence \xc3\xa9\xe2\x82\xac\n";
    }
  }
  const std::string prefix = performer::fuzz::ScratchPath("tokenizer");
  const std::string error = performer::server::TrainSentencePieceModel(
      "--input=" + corpus + " --model_prefix=" + prefix +
      " --vocab_size=60 --model_type=bpe --minloglevel=2");
  if (!error.empty()) std::abort();
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded =
      performer::server::LoadSentencePieceTokenizer(prefix + ".model");
  if (!loaded.ok()) std::abort();
  return *std::move(loaded);
}

void CheckIncremental(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                      FuzzedDataProvider& chunks) {
  performer::server::IncrementalDetokenizer detokenizer(tokenizer);
  std::string streamed;
  size_t at = 0;
  while (at < ids.size()) {
    const size_t n = chunks.ConsumeIntegralInRange<size_t>(1, ids.size() - at);
    streamed += detokenizer.Push(std::vector<int32_t>(ids.begin() + at, ids.begin() + at + n));
    at += n;
  }
  streamed += detokenizer.Finish();
  if (streamed != tokenizer.Decode(ids) || detokenizer.released() != streamed) {
    std::fprintf(stderr, "%s tokenizer, ids:", tokenizer.name().c_str());
    for (int32_t id : ids) std::fprintf(stderr, " %d", id);
    std::fprintf(stderr, "\nstreamed: [%s]\ndecoded:  [%s]\n", streamed.c_str(),
                 tokenizer.Decode(ids).c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Tokenizer> bytes = performer::server::MakeByteTokenizer();
  static const std::unique_ptr<Tokenizer> pieces = TrainSentencePiece();
  FuzzedDataProvider input(data, size);
  const std::string text = input.ConsumeRandomLengthString(4096);
  const bool sentencepiece = input.ConsumeBool();

  const std::string clean = performer::server::SanitizeUtf8(text);
  if (performer::server::SanitizeUtf8(clean) != clean) std::abort();
  if (performer::server::CompleteUtf8Prefix(text) > text.size()) std::abort();

  const Tokenizer& tokenizer = sentencepiece ? *pieces : *bytes;
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text);
  if (ids.ok()) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
    }
    if (!sentencepiece && tokenizer.Decode(*ids) != text) std::abort();
    CheckIncremental(tokenizer, *ids, input);
  }
  // Arbitrary ids, some outside the vocabulary.
  std::vector<int32_t> arbitrary;
  while (input.remaining_bytes() >= 4 && arbitrary.size() < 256) {
    arbitrary.push_back(input.ConsumeIntegralInRange<int32_t>(-2, 300));
  }
  CheckIncremental(tokenizer, arbitrary, input);
  return 0;
}
