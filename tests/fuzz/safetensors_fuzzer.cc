// The safetensors reader on arbitrary bytes: Open() either refuses the file
// with a status or accepts it, and then every tensor it lists loads with the
// shape and dtype the header gave (no LibTorch size error, no read past the
// mapping, no overflow).
#include <torch/torch.h>

#include <cstdlib>

#include "core/io/safetensors.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = performer::fuzz::ScratchPath("weights.safetensors");
  performer::fuzz::WriteFile(path, data, size);
  absl::StatusOr<performer::io::SafetensorsFile> file = performer::io::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  for (const std::string& name : file->names()) {
    const performer::io::SafetensorsTensorInfo* info = file->info(name);
    absl::StatusOr<torch::Tensor> tensor = file->Load(name);
    // Accepted tensors fit the file, so they always load.
    if (info == nullptr || !tensor.ok()) std::abort();
    if (tensor->sizes().vec() != info->shape) std::abort();
    if (static_cast<uint64_t>(tensor->numel() * tensor->element_size()) !=
        info->end - info->begin) {
      std::abort();
    }
  }
  return 0;
}
