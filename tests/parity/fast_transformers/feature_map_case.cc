// Runner for kind "feature_map" (fm_*): builds {class, query_dimensions,
// kwargs} through the catalogue, loads omega from params (strictly: every
// buffer and every param must match by name and shape), freezes the map and
// compares forward_queries / forward_keys with the case tolerance. Also
// checks that sample_seed + new_feature_map reproduces omega (on the CPU,
// whose generator the reference's draws follow, wherever the case runs).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/feature_maps/feature_map.h"
#include "core/feature_maps/feature_map_catalogue.h"
#include "tests/parity/case_runner.h"

namespace performer::testing {
namespace {

void RunFeatureMapCase(const FixtureCase& c) {
  const nlohmann::json& construct = c.spec.at("construct");
  const std::string class_name = construct.at("class");
  const int64_t query_dims = construct.at("query_dimensions");
  absl::StatusOr<NamedFeatureMapFactory> factory =
      MakeFeatureMapFactory(class_name, construct.value("kwargs", nlohmann::json::object()));
  ASSERT_TRUE(factory.ok()) << factory.status();
  ASSERT_EQ(factory->name, class_name);
  FeatureMapPtr fm = factory->make(query_dims);
  ASSERT_NE(fm, nullptr);
  fm->eval();
  EXPECT_EQ(fm->query_dims(), query_dims);

  // Strict state-dict load of the buffers.
  torch::OrderedDict<std::string, torch::Tensor> buffers = fm->named_buffers();
  EXPECT_EQ(buffers.size(), c.params.size()) << "buffers and params differ in number";
  {
    torch::NoGradGuard no_grad;
    for (const auto& [name, value] : c.params) {
      torch::Tensor* buffer = buffers.find(name);
      ASSERT_NE(buffer, nullptr) << "no buffer named " << name << " in " << fm->class_name();
      ASSERT_EQ(buffer->sizes(), value.sizes()) << "shape of " << name;
      ASSERT_EQ(buffer->scalar_type(), value.scalar_type()) << "dtype of " << name;
      buffer->copy_(value);
    }
  }
  fm->set_frozen(true);
  fm->to(c.device);
  fm->new_feature_map(c.device);  // Must not resample a frozen map.

  // The sampler makes the reference's RNG calls in the reference's order, so
  // seeding the global generator with sample_seed reproduces omega. Gaussian
  // omegas come out bit-exact here; orthogonal ones differ by a few ulps
  // because QR (and the BLAS behind einsum) differ between LAPACK builds,
  // hence the small tolerance. A wrong draw order would differ by O(1). An
  // all-zero omega was never sampled, so there is nothing to reproduce.
  if (c.spec.contains("sample_seed") && c.params.count("omega") != 0 &&
      c.params.at("omega").abs().sum().item<double>() > 0) {
    FeatureMapPtr fresh = factory->make(query_dims);
    torch::manual_seed(c.spec.at("sample_seed").get<uint64_t>());
    fresh->new_feature_map(torch::kCPU);
    EXPECT_TENSOR_CLOSE(fresh->named_buffers()["omega"], c.params.at("omega"), 1e-5, 1e-5);
  }

  const torch::Tensor phi_queries = fm->forward_queries(c.input("x_queries"));
  const torch::Tensor phi_keys = fm->forward_keys(c.input("x_keys"));
  EXPECT_EQ(phi_queries.sizes(), c.expect("phi_queries").sizes());
  EXPECT_EQ(phi_keys.sizes(), c.expect("phi_keys").sizes());
  EXPECT_EQ(fm->output_dims(), c.expect("phi_queries").size(-1));
  EXPECT_TENSOR_CLOSE(phi_queries, c.expect("phi_queries"), c.atol(), c.rtol());
  EXPECT_TENSOR_CLOSE(phi_keys, c.expect("phi_keys"), c.atol(), c.rtol());
}

PERFORMER_REGISTER_CASE_RUNNER("fast_transformers", "feature_map", RunFeatureMapCase);

}  // namespace
}  // namespace performer::testing
