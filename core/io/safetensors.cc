#include "core/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/io/bounded_file.h"

namespace performer::io {
namespace {

struct DtypeEntry {
  const char* name;
  torch::ScalarType type;
  size_t bytes;
};

constexpr DtypeEntry kDtypes[] = {
    {"F64", torch::kDouble, 8},    {"F32", torch::kFloat, 4}, {"F16", torch::kHalf, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kLong, 8},  {"I32", torch::kInt, 4},
    {"I16", torch::kShort, 2},     {"I8", torch::kChar, 1},   {"U8", torch::kByte, 1},
    {"BOOL", torch::kBool, 1},
};

const DtypeEntry* FindDtype(const std::string& name) {
  for (const DtypeEntry& e : kDtypes) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

// Largest header we accept (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
// Most dimensions a tensor may have (real ones have at most a handful).
constexpr size_t kMaxRank = 16;

}  // namespace

absl::StatusOr<std::string> SafetensorsDtypeName(torch::ScalarType type) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.type == type) return std::string(e.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype ", c10::toString(type), " has no safetensors equivalent"));
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    names_ = std::move(other.names_);
    infos_ = std::move(other.infos_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { Unmap(); }

void SafetensorsFile::Unmap() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
  mapping_ = nullptr;
  mapping_size_ = 0;
  data_ = nullptr;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  auto error = [&path](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  // A FIFO or device under the name is refused before it is opened (and the
  // open does not block should the name change in between).
  if (absl::StatusOr<uint64_t> size = RegularFileSize(path, kMaxSafetensorsFileBytes); !size.ok()) {
    return size.status();
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return error(absl::StrCat("cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return error("not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size > kMaxSafetensorsFileBytes) {
    ::close(fd);
    return error(
        absl::StrCat(file_size, " bytes, more than the limit of ", kMaxSafetensorsFileBytes));
  }
  if (file_size < 8) {
    ::close(fd);
    return error(
        absl::StrCat("truncated file: ", file_size, " bytes, less than the 8-byte header length"));
  }
  void* mapping = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) return error(absl::StrCat("mmap failed: ", std::strerror(errno)));

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = mapping;
  file.mapping_size_ = file_size;
  const auto* bytes = static_cast<const uint8_t*>(mapping);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes) {
    return error(absl::StrCat("header length ", header_len, " exceeds the limit of ",
                              kMaxHeaderBytes, " bytes"));
  }
  if (header_len > file_size - 8) {
    return error(absl::StrCat("truncated file: header length ", header_len, " but only ",
                              file_size - 8, " bytes follow"));
  }
  const uint64_t data_size = file_size - 8 - header_len;
  file.data_ = bytes + 8 + header_len;

  absl::StatusOr<nlohmann::json> parsed = ParseBoundedJson(
      std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len), "header");
  if (!parsed.ok()) return error(std::string(parsed.status().message()));
  const nlohmann::json& header = *parsed;
  if (!header.is_object()) return error("header is not a JSON object");

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::string> range_names;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) return error("__metadata__ is not an object");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) {
          return error(absl::StrCat("__metadata__ value '", m.key(), "' is not a string"));
        }
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto terror = [&](const std::string& what) {
      return error(absl::StrCat("tensor '", name, "': ", what));
    };
    if (!value.is_object()) return terror("entry is not an object");
    if (!value.contains("dtype") || !value["dtype"].is_string()) return terror("missing dtype");
    if (!value.contains("shape") || !value["shape"].is_array()) return terror("missing shape");
    if (!value.contains("data_offsets") || !value["data_offsets"].is_array() ||
        value["data_offsets"].size() != 2) {
      return terror("data_offsets must be [begin, end]");
    }
    SafetensorsTensorInfo info;
    info.dtype = value["dtype"].get<std::string>();
    const DtypeEntry* dtype = FindDtype(info.dtype);
    if (dtype == nullptr) return terror(absl::StrCat("unknown dtype '", info.dtype, "'"));
    const nlohmann::json& shape = value["shape"];
    if (shape.size() > kMaxRank) {
      return terror(absl::StrCat("shape has ", shape.size(), " dimensions, more than ", kMaxRank));
    }
    // Sizes are checked with overflow-safe arithmetic: the element count of
    // the non-zero dimensions must fit an int64 (LibTorch's own size check,
    // which would otherwise throw when the tensor is made), and the byte size
    // must fit the file.
    uint64_t numel = 1;
    uint64_t nonzero_numel = 1;
    for (const nlohmann::json& d : shape) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
        return terror("shape entries must be non-negative integers");
      }
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && (__builtin_mul_overflow(nonzero_numel, dim, &nonzero_numel) ||
                       nonzero_numel > static_cast<uint64_t>(INT64_MAX))) {
        return terror(absl::StrCat("shape ", shape.dump(), " has more than 2^63 elements"));
      }
      numel *= dim;  // At most nonzero_numel: no overflow.
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    const nlohmann::json& offsets = value["data_offsets"];
    for (const nlohmann::json& o : offsets) {
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0)) {
        return terror("data_offsets must be non-negative integers");
      }
    }
    info.begin = offsets[0].get<uint64_t>();
    info.end = offsets[1].get<uint64_t>();
    if (info.begin > info.end) return terror("data_offsets begin is after end");
    if (info.end > data_size) {
      return terror(absl::StrCat("data_offsets [", info.begin, ", ", info.end,
                                 "] out of range: the data section has ", data_size, " bytes"));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t{dtype->bytes}, &nbytes)) {
      return terror(
          absl::StrCat("shape ", shape.dump(), " of ", info.dtype, " needs more than 2^64 bytes"));
    }
    if (info.end - info.begin != nbytes) {
      return terror(absl::StrCat("shape/size mismatch: ", numel, " elements of ", info.dtype,
                                 " need ", nbytes, " bytes, data_offsets span ",
                                 info.end - info.begin));
    }
    ranges.emplace_back(info.begin, info.end);
    range_names.push_back(name);
    file.names_.push_back(name);
    file.infos_.emplace(name, std::move(info));
  }
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& prev = ranges[order[i - 1]];
    const auto& cur = ranges[order[i]];
    if (cur.first < prev.second && cur.first != cur.second) {
      return error(absl::StrCat("tensors '", range_names[order[i - 1]], "' and '",
                                range_names[order[i]], "' overlap"));
    }
  }
  return file;
}

const SafetensorsTensorInfo* SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  return it == infos_.end() ? nullptr : &it->second;
}

absl::StatusOr<torch::Tensor> SafetensorsFile::Load(const std::string& name) const {
  const SafetensorsTensorInfo* i = info(name);
  if (i == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  const DtypeEntry* dtype = FindDtype(i->dtype);
  // Open() bounded the size by the file's; allocation can still fail.
  try {
    torch::Tensor out = torch::empty(i->shape, torch::dtype(dtype->type));
    if (i->end > i->begin) std::memcpy(out.data_ptr(), data_ + i->begin, i->end - i->begin);
    return out;
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path_, ": tensor '", name, "': cannot allocate: ", e.what()));
  }
}

absl::StatusOr<std::map<std::string, torch::Tensor>> SafetensorsFile::LoadAll() const {
  std::map<std::string, torch::Tensor> out;
  for (const std::string& name : names_) {
    absl::StatusOr<torch::Tensor> t = Load(name);
    if (!t.ok()) return t.status();
    out.emplace(name, *std::move(t));
  }
  return out;
}

absl::StatusOr<std::map<std::string, torch::Tensor>> LoadSafetensors(const std::string& path) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  return file->LoadAll();
}

absl::Status SaveSafetensors(const std::string& path,
                             const std::map<std::string, torch::Tensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> blobs;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {  // std::map: sorted names.
    absl::StatusOr<std::string> dtype = SafetensorsDtypeName(tensor.scalar_type());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", name, "': ", dtype.status().message()));
    }
    torch::Tensor blob = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t nbytes = blob.numel() * blob.element_size();
    header[name] = {{"dtype", *dtype},
                    {"shape", blob.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    blobs.push_back(blob);
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  uint64_t len = text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const torch::Tensor& blob : blobs) {
    out.write(static_cast<const char*>(blob.data_ptr()),
              static_cast<std::streamsize>(blob.numel() * blob.element_size()));
  }
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace performer::io
