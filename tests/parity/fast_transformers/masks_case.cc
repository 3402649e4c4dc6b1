// Runner for kind "masks" (masks_semantics): builds each listed mask and
// compares every derived matrix and flag exactly.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/masks.h"
#include "tests/parity/case_runner.h"

namespace performer::testing {
namespace {

void RunMasksCase(const FixtureCase& c) {
  const nlohmann::json& flags = c.spec.at("mask_flags");
  for (const nlohmann::json& recipe : c.spec.at("construct").at("masks")) {
    const std::string name = recipe.at("name");
    const std::string type = recipe.at("type");
    SCOPED_TRACE(name);
    std::optional<Mask> mask;
    if (type == "FullMask") {
      if (recipe.contains("tensor")) {
        absl::StatusOr<Mask> m = Mask::FromBool(c.input(recipe.at("tensor")));
        ASSERT_TRUE(m.ok()) << m.status();
        mask = *m;
      } else {
        const auto& args = recipe.at("args");
        mask = args.size() == 1 ? Mask::Full(args[0].get<int64_t>())
                                : Mask::Full(args[0].get<int64_t>(), args[1].get<int64_t>());
      }
    } else if (type == "LengthMask") {
      std::optional<int64_t> max_len;
      if (recipe.contains("max_len")) max_len = recipe.at("max_len").get<int64_t>();
      mask = Mask::Lengths(c.input(recipe.at("tensor")), max_len);
    } else if (type == "TriangularCausalMask") {
      mask = Mask::TriangularCausal(recipe.at("args")[0].get<int64_t>());
    } else {
      FAIL() << "unknown mask type " << type;
    }
    EXPECT_TRUE(torch::equal(mask->bool_matrix(), c.expect(name + ".bool_matrix")));
    EXPECT_TRUE(torch::equal(mask->float_matrix(), c.expect(name + ".float_matrix")));
    EXPECT_TRUE(torch::equal(mask->additive_matrix(), c.expect(name + ".additive_matrix")));
    torch::Tensor finite = mask->additive_matrix_finite();
    const torch::Tensor& expected_finite = c.expect(name + ".additive_matrix_finite");
    EXPECT_TRUE(torch::equal(finite, expected_finite));
    // -0.0 vs +0.0: compare sign bits too.
    EXPECT_TRUE(torch::equal(finite.signbit(), expected_finite.signbit()));
    const nlohmann::json& f = flags.at(name);
    EXPECT_EQ(mask->all_ones(), f.at("all_ones").get<bool>());
    EXPECT_EQ(mask->lower_triangular(), f.at("lower_triangular").get<bool>());
    EXPECT_EQ(mask->is_length_mask(), f.at("is_length_mask").get<bool>());
    EXPECT_EQ(mask->shape(), f.at("shape").get<std::vector<int64_t>>());
    auto lengths_it = c.expected.find(name + ".lengths");
    if (lengths_it != c.expected.end()) {
      absl::StatusOr<torch::Tensor> len = mask->lengths();
      ASSERT_TRUE(len.ok()) << len.status();
      EXPECT_TRUE(torch::equal(*len, lengths_it->second));
    } else {
      EXPECT_FALSE(mask->lengths().ok());
    }
  }
}

PERFORMER_REGISTER_CASE_RUNNER("fast_transformers", "masks", RunMasksCase);

}  // namespace
}  // namespace performer::testing
