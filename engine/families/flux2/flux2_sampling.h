// FLUX.2's sampling (../shared/reference/flux2/README.md, "Latents, tokens, position ids" and
// "Sampling"): the model-space grid as tokens with their 4-axis ids, the schedule with BFL's
// empirical μ, and the denoiser generation and the `flux2-sample` role share, over sample_pass.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <vector>

#include "pipeline/family.h"

namespace fp8s {

class Flux2Impl;

// BFL's compute_empirical_mu for `tokens` target tokens (H/16·W/16) and `steps` steps.
double flux2_mu(int64_t tokens, int steps);
// steps + 1 sigmas: s = linspace(1, 1/N, N), σ = e^μ / (e^μ + (1/s − 1)) in FP32, then 0.
std::vector<float> flux2_sigmas(int steps, int64_t tokens);

// A grid [B,C,h,w] as tokens [B, h·w, C] (row-major) and back.
at::Tensor flux2_tokens(const at::Tensor& grid);
at::Tensor flux2_grid(const at::Tensor& tokens, int64_t h, int64_t w);
// The ids of an h×w grid's tokens, (t, i, j, 0) [h·w, 4] int64; of L text rows, (0, 0, 0, l).
at::Tensor flux2_grid_ids(int64_t h, int64_t w, int64_t t);
at::Tensor flux2_text_ids(int64_t L);

struct Flux2Guidance {
  double cfg = 1.0;  // > 1 with `neg`: pred = neg + cfg·(pos − neg) (klein base)
  std::optional<float> distilled;  // dev's guidance (into guidance_in)
};

// D(x, σ) = x − σ·v, v the transformer's velocity at t = σ for the grid x [B,128,h,w] with the
// reference latents `refs` (model space, [1,128,hr,wr] each, ids t = 10, 20, ...) appended to its
// tokens; txt, neg [1, L, context] (neg undefined: no CFG).
PassDenoiser flux2_denoiser(Flux2Impl& model, const at::Tensor& txt, const at::Tensor& neg, const Flux2Guidance& guidance,
                            const std::vector<at::Tensor>& refs, at::ScalarType compute,
                            const std::function<void(double)>& on_model_ms);

// The whole loop of the `flux2-sample` role through sample_pass with Euler: noise [1,128,h,w];
// init (img2img, from t_start = int(max(N − min(N·strength, N), 0)); also a reference, as
// Flux2KleinInpaintPipeline appends it) undefined for txt2img. Returns the latent [1,128,h,w], FP32.
at::Tensor flux2_sample(Flux2Impl& model, const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& neg,
                        const std::vector<at::Tensor>& refs, const at::Tensor& init, int steps, double strength,
                        const Flux2Guidance& guidance, at::ScalarType compute);

}  // namespace fp8s
