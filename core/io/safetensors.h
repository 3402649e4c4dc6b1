// Reader and writer for the safetensors format (Hugging Face's):
//
//   u64 little-endian n | n bytes of JSON header | raw little-endian data
//
// The header maps tensor names to {"dtype", "shape", "data_offsets"} and may
// hold a "__metadata__" map of strings. Offsets are relative to the first
// byte after the header.
//
// Open() memory-maps the file and validates all of the header before any
// tensor is read: anything but a regular file (a FIFO is refused without
// blocking), a file over kMaxSafetensorsFileBytes, a truncated file, a header
// over 100 MiB, not a JSON object or nested over 64 levels, an unknown dtype,
// more than 16 dimensions, a shape whose element count overflows an int64 or
// whose byte size disagrees with its byte range, offsets out of range or
// overlapping are errors (sizes are computed with overflow-checked
// arithmetic), and every message names the file and (where it applies) the
// tensor. A file Open() accepts loads without a LibTorch size error.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace performer::io {

// Largest weights file opened. The file is memory-mapped, not read, and every
// tensor's byte range is checked to lie inside it; the bound keeps every size
// derived from it far from overflow.
inline constexpr uint64_t kMaxSafetensorsFileBytes = uint64_t{1} << 40;

struct SafetensorsTensorInfo {
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // Byte range in the data section.
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // Tensor names in header order (sorted, as the writers produce them).
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return infos_.count(name) > 0; }
  const SafetensorsTensorInfo* info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A CPU tensor owning a copy of the data, in the stored dtype.
  absl::StatusOr<torch::Tensor> Load(const std::string& name) const;
  // Every tensor, by name.
  absl::StatusOr<std::map<std::string, torch::Tensor>> LoadAll() const;

 private:
  SafetensorsFile() = default;
  void Unmap();

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const uint8_t* data_ = nullptr;  // Start of the data section.
  std::vector<std::string> names_;
  std::map<std::string, SafetensorsTensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Convenience: Open(path) then LoadAll().
absl::StatusOr<std::map<std::string, torch::Tensor>> LoadSafetensors(const std::string& path);

// Writes `tensors` (any device; contiguous copies are made) with optional
// string metadata. Names are written in sorted order.
absl::Status SaveSafetensors(const std::string& path,
                             const std::map<std::string, torch::Tensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

// The safetensors dtype name of a torch dtype, or an error for dtypes the
// format does not have.
absl::StatusOr<std::string> SafetensorsDtypeName(torch::ScalarType type);

}  // namespace performer::io
