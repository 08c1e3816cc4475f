// Z-Image's sampling loop as ZImagePipeline runs it (../shared/reference/zimage/README.md,
// "zimage-sample"): the flow-matching Euler schedule with the Turbo scheduler's shift, CFG on the
// usual scale (C > 1: pos + (C − 1)·(pos − neg)) with diffusers' normalisation and truncation, and
// img2img from a strength.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "pipeline/family.h"

namespace fp8s {

class ZImageTransformerImpl;

struct ZImageSampling {
  int steps = 8;
  double shift = 3.0;
  double cfg = 1.0;             // 1 or less: one pass a step (Turbo)
  double cfg_norm = 0.0;        // K > 0: ‖pred‖ capped at K·‖pos‖
  double cfg_truncation = 1.0;  // a step whose t = 1 − σ exceeds it runs without CFG
  double strength = 1.0;        // img2img: how much of the schedule runs
};

// steps + 1 sigmas: s = linspace(1, 1/N, N), σ = shift·s / (1 + (shift − 1)·s), then 0; FP32 values.
std::vector<float> zimage_sigmas(int steps, double shift);
// The first step img2img runs at `strength`: int(max(N − min(N·strength, N), 0)).
int zimage_start_step(int steps, double strength);

// Classifier-free guidance as ZImagePipeline applies it, the one copy the sampling loop below and
// the generation's denoiser share: pos + g·(pos − neg), g = C − 1; with norm_cap K > 0, each item's
// 2-norm (over its channels and pixels) capped at K times its positive prediction's. pos, neg
// [B, C, h, w] FP32.
at::Tensor zimage_guidance(const at::Tensor& pos, const at::Tensor& neg, double g, double norm_cap);

// The denoiser generation samples with (and the `zimage-sample` role, through the same sample_pass):
// D(x, σ) = x − σ·v with v = −pred, the transformer at t = 1 − σ (t from the scheduler's T = 1000·σ);
// with s.cfg > 1 and `neg` defined, CFG (zimage_guidance) on the steps whose t ≤ s.cfg_truncation.
// pos, neg [1, L, D] (each item of a batch reads the same); the model runs on `device`.
PassDenoiser zimage_denoiser(ZImageTransformerImpl& model, const at::Tensor& pos, const at::Tensor& neg,
                             const ZImageSampling& s, at::ScalarType compute, const at::Device& device,
                             const std::function<void(double)>& on_model_ms);

// The whole loop of the `zimage-sample` role through generation's own path (zimage_denoiser and
// sample_pass with Euler): noise, init [1, 16, h, w]; cap [1, L, D], neg [1, Ln, D] (undefined
// without CFG); init undefined for txt2img. Returns the final latent [1, 16, h, w], FP32.
at::Tensor zimage_sample(ZImageTransformerImpl& model, const at::Tensor& noise, const at::Tensor& cap, const at::Tensor& neg,
                         const at::Tensor& init, const ZImageSampling& s, at::ScalarType compute);

}  // namespace fp8s
