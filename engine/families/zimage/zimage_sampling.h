// Z-Image's sampling loop as ZImagePipeline runs it (../shared/reference/zimage/README.md,
// "zimage-sample"): the flow-matching Euler schedule with the Turbo scheduler's shift, CFG on the
// usual scale (C > 1: pos + (C − 1)·(pos − neg)) with diffusers' normalisation and truncation, and
// img2img from a strength.
#pragma once

#include <ATen/ATen.h>

#include <vector>

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

// noise, init [1, 16, h, w]; cap [1, L, D], neg [1, Ln, D] (undefined without CFG); init undefined
// for txt2img. Returns the final latent [1, 16, h, w], FP32.
at::Tensor zimage_sample(ZImageTransformerImpl& model, const at::Tensor& noise, const at::Tensor& cap, const at::Tensor& neg,
                         const at::Tensor& init, const ZImageSampling& s, at::ScalarType compute);

}  // namespace fp8s
