#include "tests/testing/fixtures.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/io/safetensors.h"

namespace performer::testing {
namespace fs = std::filesystem;

const char* FixtureSourceName(FixtureSource source) {
  return source == FixtureSource::kRepository ? "repository" : "external";
}

std::string RepositoryFixtureRoot() { return PERFORMER_REPOSITORY_FIXTURES; }

std::string RepositoryModelsRoot() { return PERFORMER_REPOSITORY_MODELS; }

std::string ExternalFixtureRoot() {
  const char* env = std::getenv("PERFORMER_FIXTURES");
  if (env != nullptr && env[0] != '\0') return env;
  return PERFORMER_FIXTURES_DEFAULT;
}

bool ExternalFixturesPresent() {
  std::error_code ec;
  const fs::path external = ExternalFixtureRoot();
  if (!fs::is_directory(external, ec)) return false;
  return !fs::equivalent(external, RepositoryFixtureRoot(), ec);
}

std::string FixtureRoot(FixtureSource source) {
  return source == FixtureSource::kRepository ? RepositoryFixtureRoot() : ExternalFixtureRoot();
}

bool FamilyPresent(const std::string& family, FixtureSource source) {
  if (source == FixtureSource::kExternal && !ExternalFixturesPresent()) return false;
  std::error_code ec;
  return fs::is_directory(fs::path(FixtureRoot(source)) / family, ec);
}

std::vector<std::string> ListCases(const std::string& family, FixtureSource source) {
  std::vector<std::string> names;
  if (!FamilyPresent(family, source)) return names;
  const fs::path dir = fs::path(FixtureRoot(source)) / family;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory() && fs::exists(entry.path() / "case.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

const torch::Tensor& FixtureCase::input(const std::string& n) const {
  auto it = inputs.find(n);
  TORCH_CHECK(it != inputs.end(), name, ": inputs has no tensor '", n, "'");
  return it->second;
}

const torch::Tensor& FixtureCase::expect(const std::string& n) const {
  auto it = expected.find(n);
  TORCH_CHECK(it != expected.end(), name, ": expected has no tensor '", n, "'");
  return it->second;
}

double FixtureCase::atol() const { return spec.at("tolerance").value("atol", 0.0); }
double FixtureCase::rtol() const { return spec.at("tolerance").value("rtol", 0.0); }

absl::StatusOr<FixtureCase> LoadCase(const std::string& family, const std::string& name,
                                     torch::Device device, FixtureSource source) {
  FixtureCase c;
  c.name = name;
  c.device = device;
  c.dir = (fs::path(FixtureRoot(source)) / family / name).string();
  std::ifstream in(fs::path(c.dir) / "case.json");
  if (!in) return absl::NotFoundError(absl::StrCat(c.dir, "/case.json: cannot open"));
  c.spec = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (c.spec.is_discarded()) return absl::InvalidArgumentError(c.dir + "/case.json: bad JSON");
  auto load = [&](const char* file, std::map<std::string, torch::Tensor>* out,
                  bool required) -> absl::Status {
    fs::path p = fs::path(c.dir) / file;
    if (!fs::exists(p)) {
      return required ? absl::NotFoundError(p.string() + ": missing") : absl::OkStatus();
    }
    absl::StatusOr<std::map<std::string, torch::Tensor>> t = io::LoadSafetensors(p.string());
    if (!t.ok()) return t.status();
    *out = *std::move(t);
    return absl::OkStatus();
  };
  if (absl::Status s = load("inputs.safetensors", &c.inputs, false); !s.ok()) return s;
  if (absl::Status s = load("params.safetensors", &c.params, false); !s.ok()) return s;
  if (absl::Status s = load("expected.safetensors", &c.expected, false); !s.ok()) return s;
  // performer-pytorch cases keep inputs and outputs in one io.safetensors;
  // case.json "inputs" names the inputs.
  std::map<std::string, torch::Tensor> io;
  if (absl::Status s = load("io.safetensors", &io, false); !s.ok()) return s;
  std::set<std::string> input_names;
  if (c.spec.contains("inputs") && c.spec["inputs"].is_array()) {
    for (const auto& n : c.spec["inputs"]) {
      if (n.is_string()) input_names.insert(n.get<std::string>());
    }
  }
  for (auto& [name, tensor] : io) (input_names.count(name) ? c.inputs : c.expected)[name] = tensor;
  if (!device.is_cpu()) {
    for (auto* tensors : {&c.inputs, &c.params}) {
      for (auto& [name, tensor] : *tensors) tensor = tensor.to(device);
    }
  }
  return c;
}

std::optional<std::string> CompareTensors(const torch::Tensor& actual_in,
                                          const torch::Tensor& expected_in, double atol,
                                          double rtol) {
  if (!actual_in.defined()) return std::string("actual tensor is undefined");
  if (actual_in.sizes() != expected_in.sizes()) {
    std::ostringstream s;
    s << "shape " << actual_in.sizes() << " != expected " << expected_in.sizes();
    return s.str();
  }
  if (expected_in.scalar_type() == torch::kBool || expected_in.scalar_type() == torch::kLong) {
    if (!torch::equal(actual_in.to(torch::kCPU).to(expected_in.scalar_type()),
                      expected_in.to(torch::kCPU))) {
      return std::string("integer/bool tensors differ");
    }
    return std::nullopt;
  }
  torch::Tensor actual = actual_in.detach().to(torch::kCPU).to(torch::kDouble);
  torch::Tensor expected = expected_in.detach().to(torch::kCPU).to(torch::kDouble);
  torch::Tensor nan_a = actual.isnan(), nan_e = expected.isnan();
  if (!torch::equal(nan_a, nan_e)) return std::string("NaN positions differ");
  torch::Tensor inf_e = expected.isinf();
  if (!torch::equal(actual.isinf(), inf_e) ||
      !torch::equal(actual.masked_select(inf_e), expected.masked_select(inf_e))) {
    return std::string("infinite values differ");
  }
  torch::Tensor finite = expected.isfinite();
  torch::Tensor diff = (actual - expected).abs().masked_fill(~finite, 0);
  torch::Tensor allowed = atol + rtol * expected.abs().masked_fill(~finite, 0);
  torch::Tensor excess = diff - allowed;
  if (excess.numel() == 0 || excess.max().item<double>() <= 0) return std::nullopt;
  int64_t worst = excess.flatten().argmax().item<int64_t>();
  std::ostringstream s;
  s << (excess > 0).sum().item<int64_t>() << " of " << excess.numel()
    << " elements out of tolerance; worst at flat index " << worst << ": actual "
    << actual.flatten()[worst].item<double>() << " expected "
    << expected.flatten()[worst].item<double>() << " (|diff| "
    << diff.flatten()[worst].item<double>() << ", atol " << atol << ", rtol " << rtol
    << ", max |diff| " << diff.max().item<double>() << ")";
  return s.str();
}

}  // namespace performer::testing
