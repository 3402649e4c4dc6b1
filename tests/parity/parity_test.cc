// One GoogleTest case per fixture folder, enumerated when the binary starts
// (so a PERFORMER_FIXTURES set at test time is honoured):
//   Repository/<Family>Parity.Case/<case>   the repository's tests/fixtures
//   External/<Family>Parity.Case/<case>     the external root, when present
// with <Family> FastTransformers, FastTransformersLM or Performer. Both roots run in full: a case
// that both hold runs twice, once from each (the external copy may differ:
// tools/export_roundtrip points PERFORMER_FIXTURES at re-exported weights).
// A kind without a runner fails; the repository's family folders must exist
// and hold cases. The CUDA twins (<Family>ParityCuda) run the same cases on a
// GPU and are the only tests here that skip (ctest label `cuda`).
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "tests/parity/case_runner.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {

std::map<std::string, CaseRunner>& CaseRunners() {
  static auto* runners = new std::map<std::string, CaseRunner>();
  return *runners;
}

namespace {

// One case folder of one root.
struct CaseRef {
  FixtureSource source;
  std::string name;
};

void PrintTo(const CaseRef& ref, std::ostream* os) {
  *os << FixtureSourceName(ref.source) << ":" << ref.name;
}

std::vector<CaseRef> Cases(const std::string& family, FixtureSource source) {
  std::vector<CaseRef> out;
  for (std::string& name : ListCases(family, source)) out.push_back({source, std::move(name)});
  return out;
}

void RunCase(const std::string& family, const CaseRef& ref, torch::Device device = torch::kCPU) {
  absl::StatusOr<FixtureCase> c = LoadCase(family, ref.name, device, ref.source);
  ASSERT_TRUE(c.ok()) << c.status();
  // fast-transformers cases name their kind; performer-pytorch cases their model_class.
  const std::string kind = c->spec.value("kind", c->spec.value("model_class", ""));
  auto it = CaseRunners().find(family + "/" + kind);
  ASSERT_TRUE(it != CaseRunners().end())
      << "fixture " << c->dir << " has kind '" << kind << "' which this port cannot run";
  it->second(*c);
}

std::string CaseName(const ::testing::TestParamInfo<CaseRef>& info) {
  std::string out;
  for (char ch : info.param.name) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

// The family folders of the repository's root must hold cases; the external
// root's are listed (they are optional), so that the log says what ran.
#define PERFORMER_FAMILY_SUITE(Suite, family)                                                   \
  class Suite : public ::testing::TestWithParam<CaseRef> {};                                    \
  TEST_P(Suite, Case) { RunCase(family, GetParam()); }                                          \
  INSTANTIATE_TEST_SUITE_P(Repository, Suite,                                                   \
                           ::testing::ValuesIn(Cases(family, FixtureSource::kRepository)),      \
                           CaseName);                                                           \
  INSTANTIATE_TEST_SUITE_P(                                                                     \
      External, Suite, ::testing::ValuesIn(Cases(family, FixtureSource::kExternal)), CaseName); \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Suite);                                         \
  TEST(Suite##Folder, RepositoryHoldsCases) {                                                   \
    EXPECT_TRUE(FamilyPresent(family))                                                          \
        << RepositoryFixtureRoot() << "/" << family << " is absent";                            \
    EXPECT_FALSE(ListCases(family).empty())                                                     \
        << "no cases in " << RepositoryFixtureRoot() << "/" << family;                          \
    const std::size_t external = ListCases(family, FixtureSource::kExternal).size();            \
    std::cout << "[  FIXTURES] " << family << ": " << ListCases(family).size() << " cases in "  \
              << RepositoryFixtureRoot() << "; "                                                \
              << (ExternalFixturesPresent()                                                     \
                      ? std::to_string(external) + " in external root " + ExternalFixtureRoot() \
                      : "external root " + ExternalFixtureRoot() + " absent")                   \
              << std::endl;                                                                     \
  }

PERFORMER_FAMILY_SUITE(FastTransformersParity, "fast_transformers")
PERFORMER_FAMILY_SUITE(FastTransformersLMParity, "fast_transformers_lm")
PERFORMER_FAMILY_SUITE(PerformerParity, "performer")

// The performer-pytorch cases again with the model, its inputs and the
// recurrent decoder's state on the GPU: full forwards, encoder-decoder
// logits and greedy decoding (tokens equal to the CPU reference's) on CUDA.
// Skipped, saying why, where LibTorch has no CUDA or no GPU is visible.
class PerformerParityCuda : public ::testing::TestWithParam<CaseRef> {};
TEST_P(PerformerParityCuda, Case) {
  PERFORMER_REQUIRE_CUDA();
  RunCase("performer", GetParam(), torch::kCUDA);
}
INSTANTIATE_TEST_SUITE_P(Repository, PerformerParityCuda,
                         ::testing::ValuesIn(Cases("performer", FixtureSource::kRepository)),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(External, PerformerParityCuda,
                         ::testing::ValuesIn(Cases("performer", FixtureSource::kExternal)),
                         CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PerformerParityCuda);

// The FastTransformersLM cases with the model, its inputs and the decoder's
// state pool on the GPU.
class FastTransformersLMParityCuda : public ::testing::TestWithParam<CaseRef> {};
TEST_P(FastTransformersLMParityCuda, Case) {
  PERFORMER_REQUIRE_CUDA();
  RunCase("fast_transformers_lm", GetParam(), torch::kCUDA);
}
INSTANTIATE_TEST_SUITE_P(Repository, FastTransformersLMParityCuda,
                         ::testing::ValuesIn(Cases("fast_transformers_lm",
                                                   FixtureSource::kRepository)),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(External, FastTransformersLMParityCuda,
                         ::testing::ValuesIn(Cases("fast_transformers_lm",
                                                   FixtureSource::kExternal)),
                         CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FastTransformersLMParityCuda);

// The fast-transformers cases that compute (attention types, the attention
// layer, feature maps, encoders and decoders with their recurrent twins)
// again with modules, inputs and masks on the GPU. The builder and mask
// semantics cases check the catalogue, not arithmetic: they run once, above.
std::vector<CaseRef> ComputingCases(const std::string& family, FixtureSource source) {
  static const std::set<std::string> kComputing = {"attention", "attention_layer", "feature_map",
                                                   "model"};
  std::vector<CaseRef> out;
  for (CaseRef& ref : Cases(family, source)) {
    std::ifstream in(FixtureRoot(source) + "/" + family + "/" + ref.name + "/case.json");
    const nlohmann::json spec = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (spec.is_object() && kComputing.count(spec.value("kind", "")) > 0) {
      out.push_back(std::move(ref));
    }
  }
  return out;
}

class FastTransformersParityCuda : public ::testing::TestWithParam<CaseRef> {};
TEST_P(FastTransformersParityCuda, Case) {
  PERFORMER_REQUIRE_CUDA();
  RunCase("fast_transformers", GetParam(), torch::kCUDA);
}
INSTANTIATE_TEST_SUITE_P(Repository, FastTransformersParityCuda,
                         ::testing::ValuesIn(ComputingCases("fast_transformers",
                                                            FixtureSource::kRepository)),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(External, FastTransformersParityCuda,
                         ::testing::ValuesIn(ComputingCases("fast_transformers",
                                                            FixtureSource::kExternal)),
                         CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FastTransformersParityCuda);

}  // namespace
}  // namespace performer::testing
