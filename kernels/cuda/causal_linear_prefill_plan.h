// How the chunkwise prefill kernel (kernels/cuda/causal_linear_prefill_cuda.cu)
// lays a call out on the device, in plain C++ so that the host computes it
// and a host test (tests/kernels/cuda/causal_linear_prefill_plan_test.cc)
// checks it without a GPU.
//
// A block of the kernel owns (sequence, segment, tile of et value columns)
// and walks the chunks of its segment in order; its shared memory
// (PrefillSharedLayout) grows with M and et and, for the bench model, leaves
// room for one block per SM. The schedule:
//   1. et: the widest tile (all of E rounded up to 16 when it fits, at most
//      128, else 64, 32, 16) whose shared memory fits one block;
//   2. segments: when the sequences' tiles alone leave SMs idle, each
//      sequence is split into segments of at least 2 chunks (two passes and a
//      prefix scan), as many as fit in ONE wave of resident blocks: the
//      blocks of a second wave would double the time of the call;
//   3. short sequences (few chunks, so few segments) narrow et while the
//      narrower tiles add blocks and still fit in one wave (each tile
//      recomputes Qc Kc^T, so narrower tiles cost more work in all).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/host_device.h"

namespace performer::kernels::cuda {

PERFORMER_HOST_DEVICE inline int RoundUpTo16(int x) { return (x + 15) / 16 * 16; }
PERFORMER_HOST_DEVICE inline size_t AlignTo32(size_t bytes) { return (bytes + 31) / 32 * 32; }

// Byte offsets of one block's shared-memory arrays, for operands of
// `element_bytes` (2: bf16 / fp16 on tensor cores; 4: fp32, SIMT), chunks of
// `chunk` tokens, mp = M rounded up to 16 and the column tile et.
struct PrefillSharedLayout {
  int ldq = 0;  // leading dimension of Qc, Kc (elements)
  size_t q = 0, k = 0, v = 0, p = 0, scratch = 0, state = 0, state_lp = 0, total = 0;
};

PERFORMER_HOST_DEVICE inline PrefillSharedLayout MakePrefillSharedLayout(int element_bytes,
                                                                         int chunk, int mp,
                                                                         int et) {
  const bool tensor_cores = element_bytes == 2;
  const size_t operand = static_cast<size_t>(element_bytes);
  PrefillSharedLayout s;
  // The float32 (SIMT) path reads Kc rows with a stride: one extra column
  // keeps those reads off a single bank. wmma needs ld % 8 == 0 (16-bit) and
  // 32-byte aligned tiles, which mp satisfies.
  s.ldq = tensor_cores ? mp : mp + 1;
  size_t off = 0;
  s.q = off;
  off += AlignTo32(operand * chunk * s.ldq);
  s.k = off;
  off += AlignTo32(operand * chunk * s.ldq);
  s.v = off;
  off += AlignTo32(operand * chunk * et);
  s.p = off;
  off += AlignTo32(operand * chunk * chunk);
  s.scratch = off;
  if (tensor_cores) off += AlignTo32(sizeof(float) * chunk * (chunk > et ? chunk : et));
  s.state = off;
  off += AlignTo32(sizeof(float) * static_cast<size_t>(mp) * et);
  s.state_lp = off;
  if (tensor_cores) off += AlignTo32(operand * static_cast<size_t>(mp) * et);
  s.total = off;
  return s;
}

struct PrefillSchedule {
  int et = 0;                  // value columns per block
  int e_tiles = 0;             // ceil(E / et)
  int segments = 1;            // per sequence; > 1 means two passes and a scan
  int64_t segment_chunks = 0;  // chunks per segment (the last may have fewer)
  size_t shared_bytes = 0;     // per block
  int64_t blocks = 0;          // batch_heads * segments * e_tiles
  int64_t capacity = 0;        // blocks resident at once (SMs x blocks per SM)
  const char* error = nullptr;
};

// shared_bytes(et) -> size_t: a block's shared memory for tile et;
// resident_per_sm(et, bytes) -> int: blocks of that size one SM holds at
// once (>= 1 whenever bytes fit a block; a result < 1 is taken as 1).
template <typename SharedBytes, typename ResidentPerSm>
PrefillSchedule PlanPrefillSchedule(int64_t batch_heads, int64_t chunks, int e, int sms,
                                    size_t max_shared_per_block, SharedBytes shared_bytes,
                                    ResidentPerSm resident_per_sm) {
  constexpr int64_t kMinSegmentChunks = 2;
  PrefillSchedule plan;
  const int ep = RoundUpTo16(e);
  const int candidates[] = {ep < 128 ? ep : 128, 64, 32, 16};
  for (int candidate : candidates) {
    if (candidate > ep) continue;
    if (shared_bytes(candidate) <= max_shared_per_block) {
      plan.et = candidate;
      break;
    }
  }
  if (plan.et == 0) {
    plan.error = "feature dimension M too large for the shared memory of one block";
    return plan;
  }
  // The schedule for tile et: as many segments as fit in one wave.
  auto schedule_for = [&](int et) {
    PrefillSchedule s;
    s.et = et;
    s.e_tiles = (e + et - 1) / et;
    s.shared_bytes = shared_bytes(et);
    const int resident = resident_per_sm(et, s.shared_bytes);
    s.capacity = static_cast<int64_t>(sms < 1 ? 1 : sms) * (resident < 1 ? 1 : resident);
    const int64_t base = batch_heads * s.e_tiles;
    s.segment_chunks = chunks;
    if (base < s.capacity && chunks >= 2 * kMinSegmentChunks) {
      int64_t segments = s.capacity / base;
      if (segments > chunks / kMinSegmentChunks) segments = chunks / kMinSegmentChunks;
      if (segments > 1) {
        s.segment_chunks = (chunks + segments - 1) / segments;
        s.segments = static_cast<int>((chunks + s.segment_chunks - 1) / s.segment_chunks);
      }
    }
    s.blocks = base * s.segments;
    return s;
  };
  PrefillSchedule best = schedule_for(plan.et);
  while (best.et > 32 && best.blocks < best.capacity) {
    const int narrower = RoundUpTo16(best.et / 2);
    if (narrower >= best.et) break;
    const PrefillSchedule candidate = schedule_for(narrower);
    if (candidate.blocks <= best.blocks || candidate.blocks > candidate.capacity) break;
    best = candidate;
  }
  if (best.blocks > INT32_MAX) best.error = "too many sequences for one grid";
  return best;
}

}  // namespace performer::kernels::cuda
