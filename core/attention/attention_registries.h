// The three attention registries of fast-transformers: batch attentions,
// recurrent self attentions and recurrent cross attentions.
//
// Each built-in attention file exposes `absl::Status Register<Type>(Registry&)`;
// RegisterBuiltinAttentions() (core/attention/builtin_attentions.cc) calls
// them in the reference's registration order. The global accessors return
// registries with the built-ins already registered; user code may Register()
// more types on them (see tests/core/attention/quadratic_attention_test.cc).
#pragma once

#include "absl/status/status.h"
#include "core/attention/attention.h"
#include "core/recurrent/recurrent_attention.h"
#include "core/registry/registry.h"

namespace performer {

using AttentionRegistry = Registry<AttentionImpl>;
using RecurrentAttentionRegistry = Registry<RecurrentAttentionImpl>;
using RecurrentCrossAttentionRegistry = Registry<RecurrentCrossAttentionImpl>;

// Registers every built-in type into the given registries.
absl::Status RegisterBuiltinAttentions(AttentionRegistry& attention,
                                       RecurrentAttentionRegistry& recurrent,
                                       RecurrentCrossAttentionRegistry& recurrent_cross);

// Process-wide registries, built-ins registered on first use (thread-safe).
AttentionRegistry& GlobalAttentionRegistry();
RecurrentAttentionRegistry& GlobalRecurrentAttentionRegistry();
RecurrentCrossAttentionRegistry& GlobalRecurrentCrossAttentionRegistry();

}  // namespace performer
