// y = x W^T + bias for a few rows of float32 activations against bf16 or
// int8 weights (kernels/cpu/weight_formats.h): the decode step's projections
// with half or about a quarter of the fp32 weight bytes to read.
//
//   y[r, o] = sum_i x[r, i] * W[o, i] + bias[o]
//
// x (rows, in) float32, y (rows, out) float32, bias (out) float32 or null, all
// row-major and contiguous; W (out, in) is bf16 (LinearBf16) or int8 with one
// float32 scale per block of 32 columns (LinearInt8: W[o, i] =
// q[o, i] * scales[o, i / 32]). Sums are float32.
//
// Paths (LinearPath), one per instruction set, chosen at run time:
//   kScalar  plain loops in index order, any CPU: the definition the others
//            are tested against.
//   kAvx2    AVX2 + FMA: the weights widened to float32 in registers (bf16 by
//            a 16-bit shift, int8 by sign extension times its block's scale),
//            then FMAs with x as it is.
//   kAvx512  AVX-512 F/BW/VL with AVX512_BF16 (LinearBf16: vdpbf16ps) or
//            AVX512_VNNI (LinearInt8: vpdpbusd); both round x first, see
//            LinearBf16 and LinearInt8.
//   kAuto    ChosenLinearPath(): the fastest path this CPU has.
// The paths sum in different orders and the kAvx512 ones round x, so their
// results differ in the low bits. Within one path, each output is one sum in
// a fixed order whatever `rows` is, so a row's result does not depend on the
// other rows of the call (the server's exactness guarantee relies on this).
//
// Work is split over blocks of 4 output rows with at::parallel_for; every row
// of x passes over a block while it is in L1, so the weights are read from
// memory once per call whatever `rows` is (as in kernels/skinny_linear.h).
// Tuned for rows 1 to 64 (decode batches); any `rows` is correct.
// Not differentiable; nothing here allocates tensors (only a scratch copy of
// x per call, and a few KiB of widened weights per thread on the kAvx2 path).
#pragma once

#include <cstdint>

namespace performer::kernels::cpu {

enum class LinearPath { kAuto, kScalar, kAvx2, kAvx512 };

enum class LinearWeights { kBf16, kInt8 };

// "auto", "scalar", "avx2", "avx512".
const char* LinearPathName(LinearPath path);

// True when this CPU runs `path` for `weights` (kAuto and kScalar always;
// kAvx512 needs AVX512_BF16 for bf16 and AVX512_VNNI for int8 weights).
bool LinearPathAvailable(LinearWeights weights, LinearPath path);

// The path kAuto runs for `weights` here: the first available of kAvx512,
// kAvx2, kScalar.
LinearPath ChosenLinearPath(LinearWeights weights);

// bf16 weights, `weight` (out, in) as FloatToBf16 stores them.
// kAvx512 rounds x to bf16 (to nearest even, subnormals to zero) and
// vdpbf16ps sums the products of bf16 pairs in float32 (subnormal products
// flushed to zero): each product x[i] * W[o, i] then has a relative error of
// at most 2^-8 against the other paths' exact x[i] * W[o, i].
// Throws c10::Error when `path` is not available here.
void LinearBf16(const float* x, const uint16_t* weight, const float* bias, float* y, int64_t rows,
                int64_t in, int64_t out, LinearPath path = LinearPath::kAuto);

// int8 weights, `weight` (out, in) and `scales` (out, Int8BlocksPerRow(in))
// as QuantizeInt8 stores them. kAvx512 quantizes each row of x per block of
// 32 columns the same way (scale d = max |x| / 127, rounded to nearest even
// in [-127, 127]), sums a block's products exactly in int32 with vpdpbusd and
// multiplies that by both scales: each x[i] moves by at most d / 2 (plus
// float32 rounding), so |error| <= sum over blocks of d / 2 * sum |W[o, i]|.
// Throws c10::Error when `path` is not available here.
void LinearInt8(const float* x, const int8_t* weight, const float* scales, const float* bias,
                float* y, int64_t rows, int64_t in, int64_t out,
                LinearPath path = LinearPath::kAuto);

}  // namespace performer::kernels::cpu
