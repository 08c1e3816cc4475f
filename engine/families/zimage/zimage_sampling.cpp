#include "families/zimage/zimage_sampling.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "families/zimage/zimage_transformer.h"
#include "pipeline/sample_pass.h"

namespace fp8s {

std::vector<float> zimage_sigmas(int steps, double shift) {
  if (steps < 1) throw InputError("Z-Image: steps must be at least 1");
  if (shift <= 0) throw InputError("Z-Image: --shift must be positive");
  const auto s = at::linspace(1.0, 1.0 / steps, steps, at::kFloat);
  const auto sigma = (s * shift / (1 + (shift - 1) * s)).contiguous();
  std::vector<float> out(sigma.data_ptr<float>(), sigma.data_ptr<float>() + steps);
  out.push_back(0.0f);
  return out;
}

int zimage_start_step(int steps, double strength) {
  if (strength <= 0 || strength > 1) throw InputError("Z-Image: the img2img strength must be in (0, 1]");
  return static_cast<int>(std::max(steps - std::min(steps * strength, static_cast<double>(steps)), 0.0));
}

at::Tensor zimage_guidance(const at::Tensor& pos, const at::Tensor& neg, double g, double norm_cap) {
  at::Tensor pred = pos + g * (pos - neg);
  if (norm_cap > 0) {
    const int64_t B = pred.size(0);
    const auto limit = pos.flatten(1).norm(2, {1}) * norm_cap;
    const auto n = pred.flatten(1).norm(2, {1});
    const auto factor = at::where(n > limit, limit / n, at::ones_like(n));
    std::vector<int64_t> shape(static_cast<std::size_t>(pred.dim()), 1);
    shape[0] = B;
    pred = pred * factor.view(shape);
  }
  return pred;
}

PassDenoiser zimage_denoiser(ZImageTransformerImpl& model, const at::Tensor& pos, const at::Tensor& neg,
                             const ZImageSampling& s, at::ScalarType compute, const at::Device& device,
                             const std::function<void(double)>& on_model_ms) {
  const bool cfg = s.cfg > 1.0 && neg.defined();
  const double g = s.cfg - 1.0, norm_cap = s.cfg_norm, truncation = s.cfg_truncation;
  ZImageTransformerImpl* m = &model;
  PassDenoiser d;
  d.denoise = [=](const at::Tensor& x, const at::Tensor& sigma) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t B = x.size(0);
    const float t_value = (1000.0f - sigma.item<float>() * 1000.0f) / 1000.0f;
    const auto t = at::full({B}, t_value, at::kFloat);
    auto call = [&](const at::Tensor& cap) {
      return m->forward(x.to(device), t, cap.to(device).expand({B, -1, -1}), std::vector<int64_t>(B, cap.size(1)), compute)
          .to(at::kCPU, at::kFloat);
    };
    at::Tensor pred = call(pos);
    if (cfg && t_value <= truncation) pred = zimage_guidance(pred, call(neg), g, norm_cap);
    if (on_model_ms) on_model_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    return x + sigma * pred;
  };
  return d;
}

at::Tensor zimage_sample(ZImageTransformerImpl& model, const at::Tensor& noise, const at::Tensor& cap, const at::Tensor& neg,
                         const at::Tensor& init, const ZImageSampling& s, at::ScalarType compute) {
  if (s.cfg > 1.0 && !neg.defined()) throw InputError("Z-Image: CFG above 1 needs the negative prompt's features");
  const auto sigmas = at::tensor(zimage_sigmas(s.steps, s.shift), at::kFloat);
  SamplingInit start;
  if (init.defined()) {  // the run is the schedule's tail from zimage_start_step
    start.latent = init.to(at::kFloat);
    start.schedule_steps = s.steps;
    start.t_enc = s.steps - zimage_start_step(s.steps, s.strength) - 1;
  }
  const auto device = noise.device();
  return sample_pass(zimage_denoiser(model, cap, neg, s, compute, device, {}), Prediction::Flow, Sampler::Euler,
                     noise.to(at::kFloat), sigmas, start, 0);
}

}  // namespace fp8s
