#include "kernels/causal_product.h"

#include <torch/torch.h>

#include "kernels/cpu/causal_product_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/causal_product_launch.h"
#endif

namespace performer::kernels {
namespace {

class CausalDotProductFunction : public torch::autograd::Function<CausalDotProductFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& queries,
                               const torch::Tensor& keys, const torch::Tensor& values) {
    CheckKernelDevice("CausalDotProduct", queries, {&keys, &values});
    const torch::Tensor q = queries.contiguous();
    const torch::Tensor k = keys.contiguous();
    const torch::Tensor v = values.contiguous();
    ctx->save_for_backward({q, k, v});
    return cpu::CausalDotProductForward(q, k, v);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor grad = grad_outputs[0].contiguous();
    CheckKernelDevice("CausalDotProduct backward", saved[0], {&grad});
    cpu::CausalDotProductGrads grads =
        cpu::CausalDotProductBackward(saved[0], saved[1], saved[2], grad, ctx->needs_input_grad(0),
                                      ctx->needs_input_grad(1), ctx->needs_input_grad(2));
    return {grads.queries, grads.keys, grads.values};
  }
};

}  // namespace

torch::Tensor CausalDotProduct(const torch::Tensor& queries, const torch::Tensor& keys,
                               const torch::Tensor& values) {
  if (queries.is_cuda()) {
    CheckKernelDevice("CausalDotProduct", queries, {&keys, &values}, /*cuda_kernel=*/true);
#if PERFORMER_CUDA_KERNELS
    // Inference only on CUDA: the backward pass has a CPU kernel alone.
    CheckNoCudaGradients("CausalDotProduct", {&queries, &keys, &values});
    return cuda::CausalDotProductCuda(queries, keys, values);
#endif
  }
  return CausalDotProductFunction::apply(queries, keys, values);
}

}  // namespace performer::kernels
