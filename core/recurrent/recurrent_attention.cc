#include "core/recurrent/recurrent_attention.h"

#include <c10/util/Exception.h>

namespace performer {

std::vector<SlotTensorSpec> RecurrentAttentionImpl::SlotStateSpec(
    const SlotShape& /*shape*/) const {
  return {};
}

torch::Tensor RecurrentAttentionImpl::ForwardSlots(const torch::Tensor& /*queries*/,
                                                   const torch::Tensor& /*keys*/,
                                                   const torch::Tensor& /*values*/,
                                                   SlotRows& /*rows*/) {
  TORCH_CHECK(false, class_name(), " has no slot form (SlotStateSpec / ForwardSlots): it cannot ",
              "decode in a state pool");
}

}  // namespace performer
