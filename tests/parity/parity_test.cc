// One GoogleTest case per fixture folder: FastTransformers/Parity.Case/<name>
// and Performer/Parity.Case/<name>. Every case found under the fixture root is
// run; a kind without a runner fails; an absent family folder is reported and
// skipped.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
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

void RunCase(const std::string& family, const std::string& name,
             torch::Device device = torch::kCPU) {
  absl::StatusOr<FixtureCase> c = LoadCase(family, name, device);
  ASSERT_TRUE(c.ok()) << c.status();
  // fast-transformers cases name their kind; performer-pytorch cases their model_class.
  const std::string kind = c->spec.value("kind", c->spec.value("model_class", ""));
  auto it = CaseRunners().find(family + "/" + kind);
  ASSERT_TRUE(it != CaseRunners().end()) << "fixture " << family << "/" << name << " has kind '"
                                         << kind << "' which this port cannot run";
  it->second(*c);
}

std::string CaseName(const ::testing::TestParamInfo<std::string>& info) {
  std::string out;
  for (char ch : info.param) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

#define PERFORMER_FAMILY_SUITE(Suite, family)                                                    \
  class Suite : public ::testing::TestWithParam<std::string> {};                                 \
  TEST_P(Suite, Case) { RunCase(family, GetParam()); }                                           \
  INSTANTIATE_TEST_SUITE_P(Fixtures, Suite, ::testing::ValuesIn(ListCases(family)), CaseName);   \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Suite);                                          \
  TEST(Suite##Folder, Present) {                                                                 \
    if (!FamilyPresent(family)) {                                                                \
      GTEST_SKIP() << "fixture folder " << FixtureRoot() << "/" << family                        \
                   << " is absent: set PERFORMER_FIXTURES; parity cases skipped";                \
    }                                                                                            \
    EXPECT_FALSE(ListCases(family).empty()) << "no cases in " << FixtureRoot() << "/" << family; \
  }

PERFORMER_FAMILY_SUITE(FastTransformersParity, "fast_transformers")
PERFORMER_FAMILY_SUITE(PerformerParity, "performer")

// The performer-pytorch cases again with the model, its inputs and the
// recurrent decoder's state on the GPU: full forwards, encoder-decoder
// logits and greedy decoding (tokens equal to the CPU reference's) on CUDA.
// Skipped, saying why, where LibTorch has no CUDA or no GPU is visible.
class PerformerParityCuda : public ::testing::TestWithParam<std::string> {};
TEST_P(PerformerParityCuda, Case) {
  PERFORMER_REQUIRE_CUDA();
  RunCase("performer", GetParam(), torch::kCUDA);
}
INSTANTIATE_TEST_SUITE_P(Fixtures, PerformerParityCuda, ::testing::ValuesIn(ListCases("performer")),
                         CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PerformerParityCuda);

// The fast-transformers cases that compute (attention types, the attention
// layer, feature maps, encoders and decoders with their recurrent twins)
// again with modules, inputs and masks on the GPU. The builder and mask
// semantics cases check the catalogue, not arithmetic: they run once, above.
std::vector<std::string> ComputingCases(const std::string& family) {
  static const std::set<std::string> kComputing = {"attention", "attention_layer", "feature_map",
                                                   "model"};
  std::vector<std::string> out;
  for (const std::string& name : ListCases(family)) {
    std::string path = FixtureRoot();
    path.append("/").append(family).append("/").append(name).append("/case.json");
    std::ifstream in(path);
    const nlohmann::json spec = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (spec.is_object() && kComputing.count(spec.value("kind", "")) > 0) out.push_back(name);
  }
  return out;
}

class FastTransformersParityCuda : public ::testing::TestWithParam<std::string> {};
TEST_P(FastTransformersParityCuda, Case) {
  PERFORMER_REQUIRE_CUDA();
  RunCase("fast_transformers", GetParam(), torch::kCUDA);
}
INSTANTIATE_TEST_SUITE_P(Fixtures, FastTransformersParityCuda,
                         ::testing::ValuesIn(ComputingCases("fast_transformers")), CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FastTransformersParityCuda);

}  // namespace
}  // namespace performer::testing
