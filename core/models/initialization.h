// The reference's initial values of what a PerformerLM computes at construction
// rather than learns (docs/reference/performer-pytorch.md §3, §7): the
// sinusoidal tables and the Gaussian orthogonal projection matrices, plus the
// axial positional weights (axial-positional-embedding draws them from
// N(0, 1)). Our modules are built with zeros there because a loaded model takes
// them from its weights; a model trained from scratch takes them from here.
// Everything is drawn from the default generator (torch::manual_seed), so a
// seed fixes it.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace performer::models {

// [positions, dim]: all sines, then all cosines, f_i = 1 / 10000^(2i/dim), in
// float32 (docs/reference/performer-pytorch.md §3 step 2).
torch::Tensor SinusoidalTable(int64_t positions, int64_t dim);

// The reference's gaussian_orthogonal_random_matrix [rows, columns]:
// row-orthonormal blocks (Q^T of the reduced QR of a columns x columns
// standard normal matrix; the last block cut to the rows left), rows then
// scaled by the norms of the rows of a fresh standard normal [rows, columns]
// matrix (scaling 0) or by sqrt(columns) (scaling 1).
torch::Tensor GaussianOrthogonalRandomMatrix(int64_t rows, int64_t columns, int64_t scaling = 0);

// Redraws the projection matrix of every FastAttention in `model`, in module
// order (the reference's ProjectionUpdater.redraw_projections).
void RedrawProjectionMatrices(torch::nn::Module& model);

// Fills the tables ("pos_emb.emb", "layer_pos_emb.emb") with SinusoidalTable,
// the projection matrices (RedrawProjectionMatrices) and the axial weights
// ("pos_emb.weights.{0,1}", N(0, 1)). Parameters initialised by their
// modules' constructors (Linear, Embedding, LayerNorm) are left as they are.
void InitializeLikeReference(torch::nn::Module& model);

}  // namespace performer::models
