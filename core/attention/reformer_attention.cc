#include "core/attention/reformer_attention.h"

#include <torch/torch.h>

#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "core/registry/param_spec.h"

namespace performer {
namespace {

// x (N,H,B,c,F) -> (N,H,B,2c,F): each chunk preceded by the previous one,
// chunk 0 by zeros.
torch::Tensor LookBack(const torch::Tensor& x) {
  std::vector<int64_t> pad_shape = x.sizes().vec();
  pad_shape[2] = 1;
  torch::Tensor previous =
      torch::cat({torch::zeros(pad_shape, x.options()), x.narrow(2, 0, x.size(2) - 1)}, /*dim=*/2);
  return torch::cat({previous, x}, /*dim=*/3);
}

}  // namespace

ReformerAttentionImpl::ReformerAttentionImpl(ReformerAttentionOptions options)
    : options_(std::move(options)) {
  TORCH_CHECK(options_.chunk_size >= 1, "ReformerAttention: chunk_size must be >= 1, got ",
              options_.chunk_size);
  TORCH_CHECK(options_.bits >= 1, "ReformerAttention: bits must be >= 1, got ", options_.bits);
  TORCH_CHECK(options_.rounds >= 1, "ReformerAttention: rounds must be >= 1, got ",
              options_.rounds);
  dropout_ = register_module("dropout", torch::nn::Dropout(options_.attention_dropout));
}

torch::Tensor ReformerAttentionImpl::forward(const torch::Tensor& queries,
                                             const torch::Tensor& /*keys: shared-QK*/,
                                             const torch::Tensor& values, const Mask& attn_mask,
                                             const Mask& /*query_lengths*/,
                                             const Mask& key_lengths) {
  constexpr const char* kName = "ReformerAttention";
  TORCH_CHECK(queries.dim() == 4 && values.dim() == 4, kName,
              ": queries and values must be 4-D (N, L, H, E) / (N, S, H, D)");
  const int64_t batch = queries.size(0);
  const int64_t length = queries.size(1);
  const int64_t heads = queries.size(2);
  const int64_t dims = queries.size(3);
  TORCH_CHECK(values.size(0) == batch && values.size(2) == heads, kName,
              ": queries and values must have the same batch size and heads");
  TORCH_CHECK(values.size(1) == length, kName,
              ": the keys are the queries, so values need one row per query (S == L), got S = ",
              values.size(1), " and L = ", length);
  TORCH_CHECK(values.size(3) == dims, kName,
              ": the value size D must equal the query size E, got D = ", values.size(3),
              " and E = ", dims);
  TORCH_CHECK(length % options_.chunk_size == 0, kName, ": L = ", length,
              " must be divisible by chunk_size = ", options_.chunk_size);
  TORCH_CHECK(key_lengths.shape() == std::vector<int64_t>({batch, length}), kName,
              ": key_lengths must be an N x L = ", batch, " x ", length, " mask");
  TORCH_CHECK(attn_mask.shape() == std::vector<int64_t>({length, length}), kName,
              ": attn_mask must be L x L = ", length, " x ", length);
  const double temperature = SoftmaxTemperature(options_.softmax_temp, dims);

  torch::Tensor q = queries.permute({0, 2, 1, 3});  // (N, H, L, E)
  torch::Tensor v = values.permute({0, 2, 1, 3});   // (N, H, L, D)
  torch::Tensor keep =
      key_lengths.float_matrix().to(q.device(), q.scalar_type()).view({batch, 1, length, 1});
  torch::Tensor k = q / torch::sqrt((q * q).sum(-1, /*keepdim=*/true)) * keep;
  torch::Tensor key_add = key_lengths.additive_matrix().to(q.device(), q.scalar_type());
  torch::Tensor attn_add;
  if (!attn_mask.all_ones()) {
    attn_add = attn_mask.additive_matrix().to(q.device(), q.scalar_type());
  }

  const double factor = 1.0 / static_cast<double>(options_.rounds);
  torch::Tensor out;
  for (int64_t round = 0; round < options_.rounds; ++round) {
    torch::Tensor contribution = factor * Round(q, k, v, key_add, attn_add, temperature);
    out = out.defined() ? out + contribution : contribution;
  }
  return out.permute({0, 2, 1, 3}).contiguous();
}

torch::Tensor ReformerAttentionImpl::Round(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const torch::Tensor& key_add,
                                           const torch::Tensor& attn_add, double temperature) {
  const int64_t batch = q.size(0);
  const int64_t heads = q.size(1);
  const int64_t length = q.size(2);
  const int64_t dims = q.size(3);
  const int64_t chunk = options_.chunk_size;
  const int64_t chunks = length / chunk;

  // Drawn from the CPU generator whatever the device, so that one seed gives
  // the same buckets on the CPU and on CUDA.
  torch::Tensor planes =
      torch::randn({options_.bits, dims}, torch::TensorOptions().dtype(q.scalar_type()))
          .to(q.device());
  torch::Tensor projected = torch::matmul(k.detach(), planes.t());             // (N,H,L,bits)
  torch::Tensor buckets = torch::cat({projected, -projected}, -1).argmax(-1);  // (N,H,L)
  torch::Tensor order =
      std::get<1>(torch::sort(buckets, /*stable=*/true, /*dim=*/-1, /*descending=*/false));

  auto sorted = [&](const torch::Tensor& x) {
    return x.gather(2, order.unsqueeze(-1).expand({batch, heads, length, x.size(3)}))
        .view({batch, heads, chunks, chunk, x.size(3)});
  };
  torch::Tensor q_chunks = sorted(q);                              // (N,H,B,c,E)
  torch::Tensor k_windows = LookBack(sorted(k));                   // (N,H,B,2c,E)
  torch::Tensor v_windows = LookBack(sorted(v));                   // (N,H,B,2c,D)
  torch::Tensor rows = order.view({batch, heads, chunks, chunk});  // query positions
  torch::Tensor cols = LookBack(rows.unsqueeze(-1)).squeeze(-1);   // key positions (N,H,B,2c)

  // M gathered at (rows, cols), built without the L x L matrix.
  torch::Tensor mask = key_add.gather(1, cols.reshape({batch, -1}))
                           .view({batch, heads, chunks, 1, 2 * chunk})
                           .expand({batch, heads, chunks, chunk, 2 * chunk});
  torch::Tensor same_position = rows.unsqueeze(-1).eq(cols.unsqueeze(-2));  // (N,H,B,c,2c)
  if (options_.masked) mask = mask + same_position.to(mask.scalar_type()) * -1e9;
  if (attn_add.defined()) {
    mask = mask + attn_add.reshape({-1}).take(rows.unsqueeze(-1) * length + cols.unsqueeze(-2));
  }
  torch::Tensor padding = torch::zeros({chunks, 2 * chunk}, order.options().dtype(torch::kBool));
  padding[0].narrow(0, 0, chunk).fill_(true);
  mask = mask.masked_fill(padding.view({1, 1, chunks, 1, 2 * chunk}),
                          -std::numeric_limits<double>::infinity());
  mask = mask.masked_fill(mask.isinf().all(-1, /*keepdim=*/true), 0.0);

  torch::Tensor scores = torch::matmul(q_chunks, k_windows.transpose(-2, -1)) + mask;
  torch::Tensor attention = dropout_(torch::softmax(temperature * scores, -1));
  torch::Tensor out_sorted = torch::matmul(attention, v_windows).view({batch, heads, length, -1});

  torch::Tensor inverse = torch::empty_like(order).scatter_(
      -1, order, torch::arange(length, order.options()).expand_as(order));
  return out_sorted.gather(
      2, inverse.unsqueeze(-1).expand({batch, heads, length, out_sorted.size(3)}));
}

std::optional<ParamValue> ReformerAttentionImpl::attribute(const std::string& name) const {
  if (name == "chunk_size") return ParamValue(options_.chunk_size);
  if (name == "bits") return ParamValue(options_.bits);
  if (name == "rounds") return ParamValue(options_.rounds);
  if (name == "masked") return ParamValue(options_.masked);
  if (name == "softmax_temp") {
    return options_.softmax_temp ? ParamValue(*options_.softmax_temp) : ParamValue();
  }
  if (name == "dropout.p") return ParamValue(dropout_->options.p());
  if (name == "event_dispatcher") return ParamValue(options_.event_dispatcher);
  return std::nullopt;
}

absl::Status RegisterReformerAttention(AttentionRegistry& registry) {
  return registry.Register(
      "reformer", "ReformerAttention",
      {{"chunk_size", OptionalSpec(IntSpec(), int64_t{32})},
       {"bits", OptionalSpec(IntSpec(), int64_t{63})},
       {"rounds", OptionalSpec(IntSpec(), int64_t{4})},
       {"masked", OptionalSpec(BoolSpec(), false)},
       {"softmax_temp", OptionalSpec(FloatSpec())},
       {"attention_dropout", OptionalSpec(FloatSpec(), 0.1)},
       {"event_dispatcher", OptionalSpec(EventDispatcherInstanceSpec(), "")}},
      [](const std::vector<AttentionPtr>&, const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
        ReformerAttentionOptions options;
        options.chunk_size = params.at("chunk_size").as_int();
        options.bits = params.at("bits").as_int();
        options.rounds = params.at("rounds").as_int();
        options.masked = params.at("masked").as_bool();
        const ParamValue& temp = params.at("softmax_temp");
        if (!temp.is_none()) options.softmax_temp = temp.as_float();
        options.attention_dropout = params.at("attention_dropout").as_float();
        options.event_dispatcher = params.at("event_dispatcher").as_string();
        try {
          return std::make_shared<ReformerAttentionImpl>(std::move(options));
        } catch (const c10::Error& e) {
          return absl::InvalidArgumentError(e.what_without_backtrace());
        }
      });
}

}  // namespace performer
