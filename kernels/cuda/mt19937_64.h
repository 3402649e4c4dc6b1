// std::mt19937_64, written out so that device code can replay the exact
// stream of the CPU kernels (kernels/cpu/clustering_cpu.cc draws empty-cluster
// replacements from std::mt19937_64(seed)). Plain C++ with CUDA qualifiers
// when compiled by nvcc; the state lives wherever the object does (the
// clustering kernel keeps it in shared memory). Seeding and output follow
// the standard's definition of mersenne_twister_engine with the mt19937_64
// parameters ([rand.predef]); tests/kernels/cuda/mt19937_64_test.cc checks it
// against std::mt19937_64 on the host.
#pragma once

#include <cstdint>

#include "kernels/cuda/host_device.h"

namespace performer::kernels::cuda {

struct Mt19937_64 {
  static constexpr int kStateSize = 312;
  static constexpr int kShift = 156;

  uint64_t state[kStateSize];
  int index;

  PERFORMER_HOST_DEVICE void Seed(uint64_t seed) {
    state[0] = seed;
    for (int i = 1; i < kStateSize; ++i) {
      state[i] =
          6364136223846793005ULL * (state[i - 1] ^ (state[i - 1] >> 62)) + static_cast<uint64_t>(i);
    }
    index = kStateSize;
  }

  PERFORMER_HOST_DEVICE uint64_t Next() {
    if (index >= kStateSize) Twist();
    uint64_t y = state[index++];
    y ^= (y >> 29) & 0x5555555555555555ULL;
    y ^= (y << 17) & 0x71D67FFFEDA60000ULL;
    y ^= (y << 37) & 0xFFF7EEE000000000ULL;
    y ^= y >> 43;
    return y;
  }

 private:
  PERFORMER_HOST_DEVICE void Twist() {
    constexpr uint64_t kUpper = 0xFFFFFFFF80000000ULL;
    constexpr uint64_t kLower = 0x7FFFFFFFULL;
    constexpr uint64_t kMatrix = 0xB5026F5AA96619E9ULL;
    for (int i = 0; i < kStateSize; ++i) {
      const uint64_t x = (state[i] & kUpper) | (state[(i + 1) % kStateSize] & kLower);
      uint64_t shifted = x >> 1;
      if (x & 1ULL) shifted ^= kMatrix;
      state[i] = state[(i + kShift) % kStateSize] ^ shifted;
    }
    index = 0;
  }
};

}  // namespace performer::kernels::cuda
