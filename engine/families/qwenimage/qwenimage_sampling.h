// Qwen-Image's sampling as QwenImagePipeline runs it (../shared/reference/qwenimage/README.md,
// "qwenimage-sample"): the flow-matching schedule with the dynamic shift (μ from the image's token
// count) stretched to end at 0.02, the transformer at t = σ, true CFG with the per-token norm
// rescale, and img2img from a strength; the denoiser generation and the `qwenimage-sample` role
// share, over sample_pass.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "pipeline/family.h"

namespace fp8s {

class QwenImageTransformerImpl;

// μ = 0.5 + (n − 256)·0.4/7936 for n image tokens (base/max image_seq_len 256/8192, shift 0.5/0.9).
double qwenimage_mu(int64_t tokens);
// steps + 1 sigmas: s = linspace(1, 1/N, N), σ = e^μ / (e^μ + (1/s − 1)), stretched so the last is
// 0.02 (one step: 1), then 0; FP32 arithmetic as the scheduler's.
std::vector<float> qwenimage_sigmas(int steps, int64_t tokens);
// The first step img2img runs at `strength` in (0, 1]: int(max(N − min(N·strength, N), 0)).
int qwenimage_start_step(int steps, double strength);
// True CFG: comb = neg + scale·(pos − neg), rescaled per token so its norm (over the token's 64
// packed features) is the positive prediction's. pos, neg [B, 16, h, w] FP32.
at::Tensor qwenimage_true_cfg(const at::Tensor& pos, const at::Tensor& neg, double scale);

// D(x, σ) = x − σ·v, v the transformer's velocity at t = σ for the latent x [B, 16, h, w] and the
// text `pos` [1, L, D]; with cfg > 1 and `neg` defined, true CFG (qwenimage_true_cfg).
PassDenoiser qwenimage_denoiser(QwenImageTransformerImpl& model, const at::Tensor& pos, const at::Tensor& neg, double cfg,
                                at::ScalarType compute, const at::Device& device, const std::function<void(double)>& on_model_ms);

// The whole loop of the `qwenimage-sample` role through generation's own path (qwenimage_denoiser
// and sample_pass with Euler): noise, init [1, 16, h, w] (init undefined: txt2img); txt, neg
// [1, L, D] (neg undefined: no CFG). Returns the final latent [1, 16, h, w], FP32.
at::Tensor qwenimage_sample(QwenImageTransformerImpl& model, const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& neg,
                            const at::Tensor& init, int steps, double cfg, double strength, at::ScalarType compute);

}  // namespace fp8s
