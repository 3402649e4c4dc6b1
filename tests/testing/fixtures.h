// Access to the golden fixtures: case listing, loading, and tolerance
// comparison.
//
// Fixtures come from two roots:
//  * the repository's own, tests/fixtures (FixtureSource::kRepository): always
//    present, so that a fresh clone runs every suite that needs fixtures;
//  * an external root, $PERFORMER_FIXTURES if set, else the configured
//    PERFORMER_FIXTURES_DEFAULT (../shared/fixtures beside the checkout)
//    (FixtureSource::kExternal): optional; it may hold held-out cases that the
//    repository does not carry. Absent, it contributes no case.
// Functions without a source argument use the repository's root.
#pragma once

#include <torch/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace performer::testing {

enum class FixtureSource { kRepository, kExternal };

// "repository" / "external".
const char* FixtureSourceName(FixtureSource source);

// The repository's fixture root (<repo>/tests/fixtures, compiled in).
std::string RepositoryFixtureRoot();

// $PERFORMER_FIXTURES if set and non-empty, else the compiled-in
// PERFORMER_FIXTURES_DEFAULT. The folder may not exist.
std::string ExternalFixtureRoot();

// True when the external root is a folder other than the repository's root
// (a PERFORMER_FIXTURES that names tests/fixtures itself adds nothing).
bool ExternalFixturesPresent();

// The repository's default model repository (<repo>/models, compiled in):
// what performer-serve serves without --model_repository.
std::string RepositoryModelsRoot();

// The root of `source`: RepositoryFixtureRoot() or ExternalFixtureRoot().
std::string FixtureRoot(FixtureSource source = FixtureSource::kRepository);

// Sub-folders of <root>/<family> that hold a case.json, sorted; empty when the
// family folder (or, for kExternal, the external root) is absent.
std::vector<std::string> ListCases(const std::string& family,
                                   FixtureSource source = FixtureSource::kRepository);

// True when <root>/<family> exists (for kExternal: and the external root is
// present in the sense of ExternalFixturesPresent()).
bool FamilyPresent(const std::string& family, FixtureSource source = FixtureSource::kRepository);

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
                                     torch::Device device = torch::kCPU,
                                     FixtureSource source = FixtureSource::kRepository);

// Elementwise |actual - expected| <= atol + rtol * |expected| (NaNs must match
// NaNs, infinities must match exactly). Returns a description of the worst
// violation, or nullopt when everything is within tolerance.
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
