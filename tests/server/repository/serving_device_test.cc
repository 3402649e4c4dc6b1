// --device: names LibTorch does not know, devices other than CPU and CUDA,
// and CUDA where this build or machine has none are refused with a message
// that says which; CUDA is accepted only where a device is visible.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>

#include "kernels/kernels_info.h"
#include "server/repository/model_repository.h"

namespace performer::server {
namespace {

TEST(CheckServingDeviceTest, AcceptsCpu) { EXPECT_TRUE(CheckServingDevice("cpu").ok()); }

TEST(CheckServingDeviceTest, RefusesUnknownNames) {
  const absl::Status s = CheckServingDevice("gpu0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("--device=gpu0: not a device name"), std::string::npos)
      << s;
}

TEST(CheckServingDeviceTest, RefusesDevicesOtherThanCpuAndCuda) {
  const absl::Status s = CheckServingDevice("meta");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("only cpu and cuda"), std::string::npos) << s;
}

TEST(CheckServingDeviceTest, CudaNeedsACudaLibTorchAndADevice) {
  const absl::Status s = CheckServingDevice("cuda");
  if (kernels::TorchHasCuda() && torch::cuda::is_available()) {
    EXPECT_TRUE(s.ok()) << s;
    const std::string past_last = "cuda:" + std::to_string(torch::cuda::device_count());
    EXPECT_EQ(CheckServingDevice(past_last).code(), absl::StatusCode::kFailedPrecondition);
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    const std::string why =
        kernels::TorchHasCuda() ? "no CUDA device is visible" : "this build's LibTorch has no CUDA";
    EXPECT_NE(std::string(s.message()).find(why), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace performer::server
