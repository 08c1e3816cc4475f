#include "families/qwenimage/qwenimage_sampling.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "families/flux/flux_model.h"
#include "families/qwenimage/qwenimage_transformer.h"
#include "pipeline/sample_pass.h"

namespace fp8s {

double qwenimage_mu(int64_t tokens) { return 0.5 + (static_cast<double>(tokens) - 256.0) * (0.9 - 0.5) / (8192.0 - 256.0); }

std::vector<float> qwenimage_sigmas(int steps, int64_t tokens) {
  if (steps < 1 || steps > 1000) throw InputError("Qwen-Image: steps must be 1..1000");
  const float e_mu = static_cast<float>(std::exp(qwenimage_mu(tokens)));
  std::vector<float> sigma(static_cast<std::size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    const double s = steps == 1 ? 1.0 : 1.0 + i * (1.0 / steps - 1.0) / (steps - 1);
    sigma[static_cast<std::size_t>(i)] = e_mu / (e_mu + (1.0f / static_cast<float>(s) - 1.0f));
  }
  const float last = 1.0f - sigma.back();
  if (last > 0) {  // shift_terminal 0.02 (one step has σ = 1 alone: nothing to stretch)
    const float scale = last / (1.0f - 0.02f);
    for (auto& v : sigma) v = 1.0f - (1.0f - v) / scale;
  }
  sigma.push_back(0.0f);
  return sigma;
}

int qwenimage_start_step(int steps, double strength) {
  if (!(strength > 0) || strength > 1) throw InputError("Qwen-Image: the img2img strength must be in (0, 1]");
  return static_cast<int>(std::max(steps - std::min(steps * strength, static_cast<double>(steps)), 0.0));
}

at::Tensor qwenimage_true_cfg(const at::Tensor& pos, const at::Tensor& neg, double scale) {
  const auto p = flux_pack(pos), comb = flux_pack(neg + scale * (pos - neg));
  const auto rescaled = comb * (p.norm(2, {-1}, true) / comb.norm(2, {-1}, true));
  return flux_unpack(rescaled, pos.size(2), pos.size(3));
}

PassDenoiser qwenimage_denoiser(QwenImageTransformerImpl& model, const at::Tensor& pos, const at::Tensor& neg, double cfg,
                                at::ScalarType compute, const at::Device& device, const std::function<void(double)>& on_model_ms) {
  const bool true_cfg = cfg > 1.0 && neg.defined();
  QwenImageTransformerImpl* m = &model;
  PassDenoiser d;
  d.denoise = [=](const at::Tensor& x, const at::Tensor& sigma) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t B = x.size(0);
    // t = the scheduler's timestep / 1000, in FP32
    const float t = static_cast<float>(sigma.item<float>() * 1000.0f) / 1000.0f;
    auto call = [&](const at::Tensor& txt) {
      return m->forward(x.to(device), at::full({B}, t, at::kFloat), txt.to(device).expand({B, -1, -1}), at::Tensor(), {}, compute)
          .to(at::kCPU, at::kFloat);
    };
    at::Tensor v = call(pos);
    if (true_cfg) v = qwenimage_true_cfg(v, call(neg), cfg);
    if (on_model_ms) on_model_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    return x - sigma * v;
  };
  return d;
}

at::Tensor qwenimage_sample(QwenImageTransformerImpl& model, const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& neg,
                            const at::Tensor& init, int steps, double cfg, double strength, at::ScalarType compute) {
  const int64_t tokens = (noise.size(2) / 2) * (noise.size(3) / 2);
  const auto sigmas = at::tensor(qwenimage_sigmas(steps, tokens), at::kFloat);
  SamplingInit start;
  if (init.defined()) {  // the run is the schedule's tail from qwenimage_start_step
    start.latent = init.to(at::kFloat);
    start.schedule_steps = steps;
    start.t_enc = steps - qwenimage_start_step(steps, strength) - 1;
  }
  return sample_pass(qwenimage_denoiser(model, txt, neg, cfg, compute, noise.device(), {}), Prediction::Flow, Sampler::Euler,
                     noise.to(at::kFloat), sigmas, start, 0);
}

}  // namespace fp8s
