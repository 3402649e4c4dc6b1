// The translation unit that owns the shared precompiled header
// (core/torch_pch.h); every other target reuses the header compiled here.
namespace performer {
int TorchPrecompiledHeaderAnchor() { return 0; }
}  // namespace performer
