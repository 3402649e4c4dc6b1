// performer-demo: what the library does, in one run, until the server exists.
//
// Builds a causal-linear (FAVOR, frozen random features) transformer encoder
// through TransformerEncoderBuilder, its recurrent twin through
// RecurrentEncoderBuilder sharing the same weights, checks that decoding
// step by step equals the batch forward, and shows the point of the recurrent
// form: the per-sequence state has a constant size and a step costs the same
// at position 16 and at position 4096.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "core/builders/transformer_builders.h"
#include "core/masks.h"
#include "core/recurrent/recurrent_attention.h"
#include "core/runtime/torch_runtime.h"
#include "core/transformers/make_mirror.h"

namespace {

using Clock = std::chrono::steady_clock;

int64_t StateBytes(const performer::RecurrentEncoderState& state) {
  int64_t bytes = 0;
  for (const performer::AttentionState& layer : state.layers) {
    for (const torch::Tensor& t : performer::StateTensors(layer)) {
      bytes += t.numel() * static_cast<int64_t>(t.element_size());
    }
  }
  return bytes;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "performer-demo: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main() {
  performer::TorchRuntimeInfo runtime = performer::ConfigureTorchRuntime(0);
  std::printf("runtime: %s\n", performer::DescribeTorchRuntime(runtime).c_str());
  std::fflush(stdout);
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;

  const nlohmann::json config = {
      {"n_layers", 4},
      {"n_heads", 8},
      {"query_dimensions", 32},
      {"value_dimensions", 32},
      {"feed_forward_dimensions", 1024},
      {"attention_type", "causal-linear"},
      {"activation", "gelu"},
      {"feature_map",
       {{"factory", "Favor"}, {"kwargs", {{"n_dims", 64}, {"deterministic_eval", true}}}}},
  };
  auto batch_builder = performer::TransformerEncoderBuilder::FromJson(config);
  if (!batch_builder.ok()) return Fail(batch_builder.status());
  auto batch = batch_builder->Build();
  if (!batch.ok()) return Fail(batch.status());
  auto recurrent_builder = performer::RecurrentEncoderBuilder::FromJson(config);
  if (!recurrent_builder.ok()) return Fail(recurrent_builder.status());
  auto recurrent = recurrent_builder->Build();
  if (!recurrent.ok()) return Fail(recurrent.status());
  // Sample the random features once (training mode), then freeze them and
  // share every parameter and buffer with the recurrent twin.
  (*batch)->train();
  const int64_t d_model = 8 * 32;
  (void)(*batch)->forward(torch::randn({1, 4, d_model}), performer::Mask::TriangularCausal(4),
                          std::nullopt);
  (*batch)->eval();
  (*recurrent)->eval();
  if (absl::Status s = performer::MakeMirror(**batch, **recurrent); !s.ok()) return Fail(s);
  {
    auto src = (*batch)->named_buffers();
    auto dst = (*recurrent)->named_buffers();
    for (const auto& item : src) dst[item.key()].copy_(item.value());
  }

  const int64_t length = 128;
  torch::Tensor x = torch::randn({1, length, d_model});
  torch::Tensor full =
      (*batch)->forward(x, performer::Mask::TriangularCausal(length), std::nullopt);
  performer::RecurrentEncoderState state;
  double max_diff = 0;
  for (int64_t i = 0; i < length; ++i) {
    torch::Tensor y = (*recurrent)->forward(x.select(1, i), state);
    max_diff = std::max(max_diff, (y - full.select(1, i)).abs().max().item<double>());
  }
  std::printf("batch forward vs %lld recurrent steps: max |diff| = %.2e\n",
              static_cast<long long>(length), max_diff);

  // Time per step at growing positions: constant, and so is the state. A
  // batch-1 step is far too small to split across threads (each OpenMP
  // region costs more than the work), so it runs on one.
  torch::set_num_threads(1);
  performer::RecurrentEncoderState long_state;
  torch::Tensor step = torch::randn({1, d_model});
  int64_t position = 0;
  for (int64_t target : {64, 512, 2048}) {
    for (; position < target - 32; ++position) (void)(*recurrent)->forward(step, long_state);
    auto start = Clock::now();
    for (int i = 0; i < 32; ++i, ++position) (void)(*recurrent)->forward(step, long_state);
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 32;
    std::printf("position %5lld: %8.1f us/step, state %lld bytes\n", static_cast<long long>(target),
                us, static_cast<long long>(StateBytes(long_state)));
  }
  return 0;
}
