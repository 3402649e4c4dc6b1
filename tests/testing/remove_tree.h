// Test clean-up of temporary folders.
#pragma once

#include <filesystem>

namespace performer::testing {

// Removes `path` and everything under it (no error if it is absent). Not
// std::filesystem::remove_all: PyTorch's pip wheels export their own build of
// that function from libtorch.so, the dynamic linker binds a test binary's
// calls to it, and there it crashes (SIGSEGV through a null function pointer,
// seen with torch 2.11 on the GPU machine, docs/gpu.md).
void RemoveTree(const std::filesystem::path& path);

}  // namespace performer::testing
