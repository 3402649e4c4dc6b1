// Precompiled header for every target that uses LibTorch. Only headers that
// are expensive to parse and used almost everywhere belong here.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
