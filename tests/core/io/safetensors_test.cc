#include "core/io/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "tests/testing/remove_tree.h"

namespace performer::io {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("safetensors_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { ::performer::testing::RemoveTree(dir_); }

  // Writes a file made of a header (as given) and `data_bytes` zero bytes.
  std::string WriteRaw(const std::string& header, size_t data_bytes, const char* name = "f") {
    std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    uint64_t len = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
    out << header;
    out << std::string(data_bytes, '\0');
    return path;
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  std::map<std::string, torch::Tensor> tensors = {
      {"a.f32", torch::randn({2, 3})},
      {"b.f16", torch::randn({4}).to(torch::kHalf)},
      {"c.bf16", torch::randn({1, 2}).to(torch::kBFloat16)},
      {"d.i64", torch::arange(5)},
      {"e.bool", torch::tensor({true, false, true})},
      {"f.empty", torch::zeros({0, 3})},
  };
  std::string path = (dir_ / "rt.safetensors").string();
  ASSERT_TRUE(SaveSafetensors(path, tensors, {{"format", "pt"}}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->info("c.bf16")->dtype, "BF16");
  for (const auto& [name, t] : tensors) {
    absl::StatusOr<torch::Tensor> loaded = file->Load(name);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(*loaded, t)) << name;
  }
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open((dir_ / "nope").string());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, TruncatedBeforeHeaderLength) {
  std::string path = (dir_ / "short").string();
  std::ofstream(path, std::ios::binary) << "abc";
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find(path), std::string::npos);
}

TEST_F(SafetensorsTest, TruncatedHeader) {
  std::string path = WriteRaw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  // Cut the file in the middle of the header.
  fs::resize_file(path, 20);
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status();
}

TEST_F(SafetensorsTest, BadHeaderJson) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(WriteRaw("{not json", 0));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("not valid JSON"), std::string::npos) << f.status();
}

TEST_F(SafetensorsTest, UnknownDtypeNamesTheTensor) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(
      WriteRaw(R"({"w":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("tensor 'w'"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("unknown dtype 'F8'"), std::string::npos) << f.status();
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(
      WriteRaw(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("out of range"), std::string::npos) << f.status();
}

TEST_F(SafetensorsTest, ShapeSizeMismatch) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(
      WriteRaw(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("shape/size mismatch"), std::string::npos) << f.status();
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(WriteRaw(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("overlap"), std::string::npos) << f.status();
}

TEST_F(SafetensorsTest, LoadUnknownNameIsNotFound) {
  std::string path = (dir_ / "one.safetensors").string();
  ASSERT_TRUE(SaveSafetensors(path, {{"x", torch::ones({1})}}).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Load("y").status().code(), absl::StatusCode::kNotFound);
}

// Expects `f` to be an INVALID_ARGUMENT error whose message holds `path` and
// every one of `parts`.
void ExpectRefused(const absl::StatusOr<SafetensorsFile>& f, const std::string& path,
                   std::initializer_list<const char*> parts) {
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status();
  for (const char* part : parts) {
    EXPECT_NE(f.status().message().find(part), std::string::npos) << part << ": " << f.status();
  }
}

// One entry of shape [2^31, 2^31] with data_offsets [0, 0]: its byte count
// overflows 64 bits to 0, which once matched the empty range and made
// LibTorch throw when the tensor was allocated.
TEST_F(SafetensorsTest, ByteSizeOverflowIsRefused) {
  const std::string path =
      WriteRaw(R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", 0);
  ExpectRefused(SafetensorsFile::Open(path), path, {"tensor 'w'", "2^64 bytes"});
}

TEST_F(SafetensorsTest, ElementCountOverflowIsRefused) {
  const std::string path =
      WriteRaw(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0);
  ExpectRefused(SafetensorsFile::Open(path), path, {"tensor 'w'", "2^63 elements"});
  const std::string max = WriteRaw(
      R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0, "max");
  ExpectRefused(SafetensorsFile::Open(max), max, {"tensor 'w'", "2^63 elements"});
}

// Zero elements, but LibTorch multiplies the dimensions in order and refuses
// a product past 2^63 before it reaches the zero.
TEST_F(SafetensorsTest, EmptyTensorWithHugeDimensionsIsRefused) {
  const std::string path = WriteRaw(
      R"({"w":{"dtype":"F32","shape":[8589934592,8589934592,0],"data_offsets":[0,0]}})", 0);
  ExpectRefused(SafetensorsFile::Open(path), path, {"tensor 'w'", "2^63 elements"});
}

TEST_F(SafetensorsTest, EmptyTensorWithLargeDimensionLoads) {
  const std::string path =
      WriteRaw(R"({"w":{"dtype":"F32","shape":[2147483648,0],"data_offsets":[0,0]}})", 0);
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<torch::Tensor> t = f->Load("w");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->numel(), 0);
  EXPECT_EQ(t->size(0), int64_t{1} << 31);
}

TEST_F(SafetensorsTest, TooManyDimensionsAreRefused) {
  const std::string path = WriteRaw(
      R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
      4);
  ExpectRefused(SafetensorsFile::Open(path), path, {"tensor 'w'", "17 dimensions"});
}

TEST_F(SafetensorsTest, DeeplyNestedHeaderIsRefused) {
  const std::string path = WriteRaw(
      R"({"__metadata__":{"a":)" + std::string(10000, '[') + std::string(10000, ']') + "}}", 0);
  ExpectRefused(SafetensorsFile::Open(path), path, {"nested deeper"});
}

TEST_F(SafetensorsTest, DirectoryIsRefused) {
  const std::string path = (dir_ / "a_directory").string();
  fs::create_directories(path);
  ExpectRefused(SafetensorsFile::Open(path), path, {"a directory, not a regular file"});
}

// A FIFO under the file's name is refused at once; opening it for reading
// would wait for a writer forever.
TEST_F(SafetensorsTest, FifoIsRefusedWithoutBlocking) {
  const std::string path = (dir_ / "weights.safetensors").string();
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  std::future<absl::StatusOr<SafetensorsFile>> opened =
      std::async(std::launch::async, [&path] { return SafetensorsFile::Open(path); });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Release the blocked reader so that the test can end, then fail.
    const int writer = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
    opened.wait();
    FAIL() << "Open blocked on a FIFO";
  }
  ExpectRefused(opened.get(), path, {"a FIFO, not a regular file"});
}

}  // namespace
}  // namespace performer::io
