// A scratch file per fuzzer process, for the readers that take a path: the
// input is written to it before each run.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace performer::fuzz {

// <tmp>/performer_fuzz_<pid>/<name>, its folder created on first use.
inline std::string ScratchPath(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("performer_fuzz_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace performer::fuzz
