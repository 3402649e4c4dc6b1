#include "kernels/local_product.h"

#include <torch/torch.h>

#include "kernels/cpu/local_product_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/local_product_launch.h"
#endif

namespace performer::kernels {
namespace {

class LocalDotProductFunction : public torch::autograd::Function<LocalDotProductFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& queries,
                               const torch::Tensor& keys, const torch::Tensor& attn_mask_finite,
                               const torch::Tensor& key_lengths, int64_t local_context) {
    CheckKernelDevice("LocalDotProduct", queries, {&keys, &attn_mask_finite, &key_lengths});
    const torch::Tensor q = queries.contiguous();
    const torch::Tensor k = keys.contiguous();
    // The mask and the lengths are constants of the op: no gradient flows to
    // them, so they may come in any dtype that converts.
    const torch::Tensor mask = attn_mask_finite.to(queries.scalar_type()).contiguous();
    const torch::Tensor lengths = key_lengths.to(torch::kLong).contiguous();
    ctx->save_for_backward({q, k, lengths});
    ctx->saved_data["local_context"] = local_context;
    return cpu::LocalDotProductForward(q, k, mask, lengths, local_context);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor grad = grad_outputs[0].contiguous();
    CheckKernelDevice("LocalDotProduct backward", saved[0], {&grad});
    cpu::LocalDotProductGrads grads = cpu::LocalDotProductBackward(
        saved[0], saved[1], saved[2], grad, ctx->saved_data["local_context"].toInt(),
        ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    return {grads.queries, grads.keys, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

class LocalWeightedAverageFunction
    : public torch::autograd::Function<LocalWeightedAverageFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx,
                               const torch::Tensor& attention, const torch::Tensor& values) {
    CheckKernelDevice("LocalWeightedAverage", attention, {&values});
    const torch::Tensor a = attention.contiguous();
    const torch::Tensor v = values.contiguous();
    ctx->save_for_backward({a, v});
    return cpu::LocalWeightedAverageForward(a, v);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor grad = grad_outputs[0].contiguous();
    CheckKernelDevice("LocalWeightedAverage backward", saved[0], {&grad});
    cpu::LocalWeightedAverageGrads grads = cpu::LocalWeightedAverageBackward(
        saved[0], saved[1], grad, ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    return {grads.attention, grads.values};
  }
};

}  // namespace

torch::Tensor LocalDotProduct(const torch::Tensor& queries, const torch::Tensor& keys,
                              const torch::Tensor& attn_mask_finite,
                              const torch::Tensor& key_lengths, int64_t local_context) {
  if (queries.is_cuda()) {
    CheckKernelDevice("LocalDotProduct", queries, {&keys, &attn_mask_finite, &key_lengths},
                      /*cuda_kernel=*/true);
#if PERFORMER_CUDA_KERNELS
    // Inference only on CUDA: the backward pass has a CPU kernel alone.
    CheckNoCudaGradients("LocalDotProduct", {&queries, &keys});
    return cuda::LocalDotProductCuda(queries, keys, attn_mask_finite, key_lengths, local_context);
#endif
  }
  return LocalDotProductFunction::apply(queries, keys, attn_mask_finite, key_lengths,
                                        local_context);
}

torch::Tensor LocalWeightedAverage(const torch::Tensor& attention, const torch::Tensor& values) {
  if (attention.is_cuda()) {
    CheckKernelDevice("LocalWeightedAverage", attention, {&values}, /*cuda_kernel=*/true);
#if PERFORMER_CUDA_KERNELS
    CheckNoCudaGradients("LocalWeightedAverage", {&attention, &values});
    return cuda::LocalWeightedAverageCuda(attention, values);
#endif
  }
  return LocalWeightedAverageFunction::apply(attention, values);
}

}  // namespace performer::kernels
