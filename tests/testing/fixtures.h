// Access to the golden fixtures under $PERFORMER_FIXTURES (default
// ../shared/fixtures beside the repository): case listing, loading, and
// tolerance comparison.
#pragma once

#include <torch/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace performer::testing {

// The fixture root: $PERFORMER_FIXTURES if set, else the compiled-in default.
std::string FixtureRoot();

// Sub-folders of <root>/<family> that hold a case.json, sorted; empty when the
// family folder is absent.
std::vector<std::string> ListCases(const std::string& family);

// True when <root>/<family> exists.
bool FamilyPresent(const std::string& family);

struct FixtureCase {
  std::string name;
  std::string dir;
  nlohmann::json spec;  // case.json
  std::map<std::string, torch::Tensor> inputs;
  std::map<std::string, torch::Tensor> params;    // Empty when the file is absent.
  std::map<std::string, torch::Tensor> expected;  // Always on the CPU.
  // Where the case runs: inputs and params are loaded onto it, and runners
  // move their models there (the CUDA parity suite uses kCUDA).
  torch::Device device = torch::kCPU;

  const torch::Tensor& input(const std::string& name) const;
  const torch::Tensor& expect(const std::string& name) const;
  double atol() const;
  double rtol() const;
};

absl::StatusOr<FixtureCase> LoadCase(const std::string& family, const std::string& name,
                                     torch::Device device = torch::kCPU);

// Elementwise |actual - expected| <= atol + rtol * |expected| (NaNs must match
// NaNs, infinities must match exactly). Returns a description of the worst
// violation, or nullopt when everything is within tolerance. Optional `rows`
// mask (bool, broadcastable to the leading dims) restricts the comparison.
std::optional<std::string> CompareTensors(const torch::Tensor& actual,
                                          const torch::Tensor& expected, double atol, double rtol);

}  // namespace performer::testing

// GoogleTest assertion: EXPECT_TENSOR_CLOSE(actual, expected, atol, rtol).
#define EXPECT_TENSOR_CLOSE(actual, expected, atol, rtol)                           \
  do {                                                                              \
    auto performer_cmp_ =                                                           \
        ::performer::testing::CompareTensors((actual), (expected), (atol), (rtol)); \
    EXPECT_FALSE(performer_cmp_.has_value())                                        \
        << #actual << " vs " << #expected << ": " << performer_cmp_.value_or("");   \
  } while (0)
