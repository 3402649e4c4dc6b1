// CUDA kernel benchmarks, against the device's own measured rates in the
// same run (docs/gpu.md). Needs only LibTorch (with CUDA) and kernels/, so
// that the core-less GPU build (-DPERFORMER_BUILD_CORE=OFF) has it:
//
//   * copy: device-to-device copy bandwidth of a 1 GiB buffer (read + write),
//     the reference for memory-bound kernels;
//   * decode step: kernels::FavorStateStep over the bench model's attention
//     state (8 heads, 256 features, dim_head 64, float32) for B = 1, 64, 256
//     and 1024 sequences: state bytes read + written per second, as a
//     fraction of the copy bandwidth (goal >= 70%), for each CUDA kernel
//     forced (CudaStepKernel: row blocks, vector, cluster);
//   * fused projections: kernels::FusedLinear over one bench-model layer's
//     four projections (norm + q/k/v 512 -> 1536, output 512 -> 512 +
//     residual, norm + w1 512 -> 2048 + GELU, w2 2048 -> 512 + residual) for
//     B = 1, 8, 32, 64, 256: float32 and bf16 weights, each through its own
//     kernel and through cuBLAS + tensor ops, and bf16 through the
//     tensor-core kernel (kernels::SetCudaFusedLinearTensorCores); weight
//     bytes read per second as a fraction of the copy bandwidth;
//   * bf16 GEMM: torch::matmul of two 8192 x 8192 bf16 matrices, the
//     reference for tensor-core kernels;
//   * prefill: kernels::CausalLinearPrefill (bf16 inputs, fp32 accumulation)
//     for N = 1, H = 8, M = 256, E = 65 at L = 1k ... 64k: useful FLOP/s as
//     a fraction of the GEMM rate (goal >= 40%), and the same chunkwise
//     algorithm written as plain LibTorch ops on the same GPU.
//
// Prints a Markdown table. Without CUDA it says so and exits 0.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "bench/gpu_reference.h"
#include "kernels/causal_linear_prefill.h"
#include "kernels/fused_linear.h"
#include "kernels/kernels_info.h"
#include "kernels/linear_state_step.h"

namespace {

constexpr int64_t kHeads = 8;
constexpr int64_t kFeatures = 256;
constexpr int64_t kDimHead = 64;

using performer::bench::DeviceCopyBandwidth;
using performer::bench::MedianDeviceSeconds;

double Bf16GemmRate() {
  const auto options = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const int64_t n = 8192;
  torch::Tensor a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  const double seconds = MedianDeviceSeconds([&] { torch::matmul(a, b); });
  return 2.0 * n * n * n / seconds;
}

// Returns state bytes moved per second by one FavorStateStep over B sequences.
double DecodeStepBandwidth(int64_t batch, double* seconds_out) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  const int64_t rows = batch * kHeads;
  torch::Tensor state = torch::zeros({rows, kFeatures, kDimHead + 1}, f32);
  torch::Tensor key_max = torch::zeros({rows}, f32);
  torch::Tensor sums = torch::zeros({rows, kDimHead + 1}, f32);
  torch::Tensor projections = torch::randn({batch, 2, kHeads, kFeatures}, f32);
  torch::Tensor diag = torch::rand({batch, 2, kHeads}, f32);
  torch::Tensor v = torch::randn({rows, kDimHead}, f32);
  torch::NoGradGuard no_grad;
  const double seconds = MedianDeviceSeconds([&] {
    performer::kernels::FavorStateStep(state, key_max, sums, projections, diag, v, 1e-4, 1e-6);
  });
  *seconds_out = seconds;
  // The state is read and written once; the inputs and outputs are small
  // but counted too.
  const double bytes =
      2.0 * static_cast<double>(state.nbytes() + sums.nbytes() + key_max.nbytes()) +
      static_cast<double>(projections.nbytes() + diag.nbytes() + v.nbytes()) +
      static_cast<double>(rows * kDimHead * 4);
  return bytes / seconds;
}

// The chunkwise algorithm as plain LibTorch ops (the baseline).
// The fused-projection table (see the top of this file).
void FusedProjectionTable(double copy) {
  namespace k = performer::kernels;
  constexpr int64_t kDim = 512;
  const auto f32 = torch::TensorOptions().device(torch::kCUDA);
  struct Layer {
    torch::Tensor qkv, out, w1, w2;
  };
  auto make = [&](torch::ScalarType dtype) {
    torch::manual_seed(1);
    return Layer{(torch::randn({3 * kDim, kDim}, f32) * 0.02).to(dtype),
                 (torch::randn({kDim, kDim}, f32) * 0.02).to(dtype),
                 (torch::randn({4 * kDim, kDim}, f32) * 0.02).to(dtype),
                 (torch::randn({kDim, 4 * kDim}, f32) * 0.02).to(dtype)};
  };
  const Layer fp32 = make(torch::kFloat), bf16 = make(torch::kBFloat16);
  const torch::Tensor gamma = torch::ones({kDim}, f32), beta = torch::zeros({kDim}, f32);
  const torch::Tensor b1 = torch::zeros({4 * kDim}, f32), b2 = torch::zeros({kDim}, f32);
  auto layer = [&](const Layer& w, const torch::Tensor& x) {
    k::FusedLinearOptions norm;
    norm.norm_weight = gamma;
    norm.norm_bias = beta;
    const torch::Tensor qkv = k::FusedLinear(x, w.qkv, norm);
    k::FusedLinearOptions residual;
    residual.residual = x;
    const torch::Tensor h = k::FusedLinear(qkv.narrow(1, 0, kDim).contiguous(), w.out, residual);
    k::FusedLinearOptions up = norm;
    up.bias = b1;
    up.activation = k::FusedActivation::kGelu;
    k::FusedLinearOptions down;
    down.bias = b2;
    down.residual = h;
    return k::FusedLinear(k::FusedLinear(h, w.w1, up), w.w2, down);
  };
  const double params = static_cast<double>(kDim) * kDim * 12;
  std::printf(
      "\n| one layer's projections | fp32 own kernel | of copy | fp32 cuBLAS + ops | bf16 own "
      "kernel | of copy | bf16 cuBLAS + ops | bf16 tensor cores | of copy | bf16 / fp32 own |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  const int64_t threshold = k::CudaFusedLinearMaxRows();
  auto timed = [&](const Layer& w, const torch::Tensor& x, int64_t max_rows,
                   bool tensor_cores = false) {
    k::SetCudaFusedLinearMaxRows(max_rows);
    k::SetCudaFusedLinearTensorCores(tensor_cores);
    const double seconds = MedianDeviceSeconds([&] { layer(w, x); });
    k::SetCudaFusedLinearMaxRows(threshold);
    k::SetCudaFusedLinearTensorCores(false);
    return seconds;
  };
  for (int64_t batch : {1, 8, 32, 64, 256}) {
    const torch::Tensor x = torch::randn({batch, kDim}, f32);
    const double own = timed(fp32, x, 1 << 20), cublas = timed(fp32, x, 0);
    const double half = timed(bf16, x, 1 << 20), half_cublas = timed(bf16, x, 0);
    const double mma = timed(bf16, x, 0, true);
    std::printf(
        "| B = %ld | %.1f us | %.0f%% | %.1f us | %.1f us | %.0f%% | %.1f us | %.1f us | %.0f%% | "
        "%.2fx |\n",
        static_cast<long>(batch), own * 1e6, 100.0 * 4 * params / own / copy, cublas * 1e6,
        half * 1e6, 100.0 * 2 * params / half / copy, half_cublas * 1e6, mma * 1e6,
        100.0 * 2 * params / mma / copy, own / half);
  }
}

torch::Tensor PrefillWithTorchOps(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, int64_t chunk) {
  const int64_t length = q.size(2);
  torch::Tensor state =
      torch::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, q.options().dtype(torch::kFloat));
  torch::Tensor mask = torch::ones({chunk, chunk}, q.options().dtype(torch::kBool)).tril();
  std::vector<torch::Tensor> outs;
  for (int64_t start = 0; start < length; start += chunk) {
    const int64_t c = std::min(chunk, length - start);
    torch::Tensor qc = q.narrow(2, start, c), kc = k.narrow(2, start, c),
                  vc = v.narrow(2, start, c);
    torch::Tensor scores = torch::matmul(qc, kc.transpose(-1, -2))
                               .masked_fill(mask.narrow(0, 0, c).narrow(1, 0, c).logical_not(), 0);
    outs.push_back(torch::matmul(scores, vc).to(torch::kFloat) +
                   torch::matmul(qc.to(torch::kFloat), state));
    state = state + torch::matmul(kc.transpose(-1, -2).to(torch::kFloat), vc.to(torch::kFloat));
  }
  return torch::cat(outs, 2);
}

int Run() {
  if (!performer::kernels::TorchHasCuda() || !performer::kernels::CudaKernelsCompiled() ||
      !torch::cuda::is_available()) {
    std::printf(
        "gpu_kernel_bench: no CUDA (LibTorch CUDA: %d, kernels/cuda compiled: %d, device: "
        "%d); nothing to measure\n",
        performer::kernels::TorchHasCuda() ? 1 : 0,
        performer::kernels::CudaKernelsCompiled() ? 1 : 0, torch::cuda::is_available() ? 1 : 0);
    return 0;
  }
  torch::manual_seed(0);
  const double copy = DeviceCopyBandwidth();
  const double gemm = Bf16GemmRate();
  std::printf("| reference | rate |\n|---|---|\n");
  std::printf("| device copy (read + write) | %.0f GB/s |\n", copy / 1e9);
  std::printf("| bf16 GEMM 8192^3 | %.1f TFLOP/s |\n\n", gemm / 1e12);

  // B = 64's state (34 MB) fits in an H100's 50 MB L2 across repetitions;
  // from B = 256 on (136 MB and more) every step streams it from HBM. Each
  // CUDA kernel of the step (CudaStepKernel) forced, in the same run.
  std::printf(
      "| decode step (FavorStateStep) | state MB | row-block kernel | of copy | vector kernel | "
      "of copy | cluster kernel | of copy | vector / row-block speed | cluster / row-block "
      "speed |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  using performer::kernels::CudaStepKernel;
  for (int64_t batch : {1, 64, 256, 1024}) {
    auto forced = [&](CudaStepKernel kernel, double* seconds) {
      const performer::kernels::ScopedCudaStepKernel selected(kernel);
      return DecodeStepBandwidth(batch, seconds);
    };
    double rows_seconds = 0, vector_seconds = 0, cluster_seconds = 0;
    const double rows_bandwidth = forced(CudaStepKernel::kRowBlocks, &rows_seconds);
    const double vector_bandwidth = forced(CudaStepKernel::kVectorSplit, &vector_seconds);
    const double cluster_bandwidth = forced(CudaStepKernel::kClusterSplit, &cluster_seconds);
    const double state_mb = 4.0 * batch * kHeads * kFeatures * (kDimHead + 1) / 1e6;
    std::printf(
        "| B = %ld | %.1f | %.1f us | %.0f%% | %.1f us | %.0f%% | %.1f us | %.0f%% | %.2fx | "
        "%.2fx |\n",
        static_cast<long>(batch), state_mb, rows_seconds * 1e6, 100.0 * rows_bandwidth / copy,
        vector_seconds * 1e6, 100.0 * vector_bandwidth / copy, cluster_seconds * 1e6,
        100.0 * cluster_bandwidth / copy, rows_seconds / vector_seconds,
        rows_seconds / cluster_seconds);
  }

  FusedProjectionTable(copy);

  std::printf(
      "\n| prefill L | kernel | TFLOP/s | of bf16 GEMM | LibTorch ops | kernel speed-up |\n"
      "|---|---|---|---|---|---|\n");
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const int64_t chunk = 64;
  for (int64_t length : {1024, 4096, 16384, 65536}) {
    torch::Tensor q = torch::rand({1, kHeads, length, kFeatures}, bf16);
    torch::Tensor k = torch::rand({1, kHeads, length, kFeatures}, bf16);
    torch::Tensor v = torch::randn({1, kHeads, length, kDimHead + 1}, bf16);
    torch::NoGradGuard no_grad;
    const double kernel =
        MedianDeviceSeconds([&] { performer::kernels::CausalLinearPrefill(q, k, v); });
    const double ops = MedianDeviceSeconds([&] { PrefillWithTorchOps(q, k, v, chunk); }, 1, 3);
    // Useful work of the chunkwise form per head and token: Q Kc^T (C M),
    // the masked product with V (C E), Q S and the state update (M E each).
    const double e = static_cast<double>(kDimHead + 1);
    const double flops =
        2.0 * kHeads * length * (chunk * kFeatures + chunk * e + 2.0 * kFeatures * e);
    std::printf("| %ld | %.2f ms | %.1f | %.0f%% | %.2f ms | %.1fx |\n", static_cast<long>(length),
                kernel * 1e3, flops / kernel / 1e12, 100.0 * flops / kernel / gemm, ops * 1e3,
                ops / kernel);
  }
  return 0;
}

}  // namespace

int main() {
  try {
    return Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_kernel_bench: %s\n", e.what());
    return 1;
  }
}
