#include "pipeline/sample_pass.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <stdexcept>

namespace fp8s {

at::Tensor sample_pass(const PassDenoiser& model, Prediction prediction, Sampler sampler, const at::Tensor& noise,
                       const at::Tensor& full_sigmas, const SamplingInit& init, uint64_t seed,
                       const StepCallback& callback_in) {
  const StepCallback callback = !model.step_done ? callback_in
                                                 : StepCallback([&](int step, int steps, float sigma, const at::Tensor& x,
                                                                    const at::Tensor& denoised) {
                                                     model.step_done(step, steps);
                                                     if (callback_in) callback_in(step, steps, sigma, x, denoised);
                                                   });
  const bool img2img = init.latent.defined();
  const int schedule_steps = static_cast<int>(full_sigmas.size(0)) - 1;
  if (schedule_steps < 1) throw std::invalid_argument("sample_pass: a schedule needs at least one step");
  const int first = img2img ? schedule_steps - init.t_enc - 1 : 0;  // the steps skipped
  const at::Tensor x0 = img2img ? init.latent.to(at::kFloat).expand_as(noise) : at::Tensor();
  // inpainting: outside the mask every step's prediction is the init latent
  auto keep_init = [&](const at::Tensor& denoised) {
    return init.keep.defined() ? x0 * init.keep + denoised * (1 - init.keep) : denoised;
  };
  at::Tensor x;
  if (sampler == Sampler::Ddim) {
    if (!model.eps) throw std::invalid_argument("sample_pass: DDIM needs a discrete-time ε model");
    const auto& acp = model.alphas_cumprod;
    const auto ts = ddim_timesteps(schedule_steps);
    const EpsModel eps = !init.keep.defined() ? model.eps : EpsModel([&](const at::Tensor& xt, int64_t t) {
      const auto a = acp[t];
      const auto e = model.eps(xt, t);
      const auto pred_x0 = keep_init((xt - at::sqrt(1 - a) * e) / at::sqrt(a));
      return (xt - at::sqrt(a) * pred_x0) / at::sqrt(1 - a);
    });
    // ldm's timesteps can number one more than the steps: the run is their last t_enc + 1
    const int ddim_first = img2img ? std::max(0, static_cast<int>(ts.size()) - init.t_enc - 1) : 0;
    const auto a0 = acp[ts[static_cast<std::size_t>(ddim_first)]];
    x = img2img ? at::sqrt(a0) * x0 + at::sqrt(1 - a0) * noise : noise;
    x = sample_ddim(eps, x, schedule_steps, acp, callback, ddim_first);
  } else {
    const Denoiser denoise = !init.keep.defined() ? model.denoise : Denoiser([&](const at::Tensor& xs, const at::Tensor& sigma) {
      return keep_init(model.denoise(xs, sigma));
    });
    const auto sigmas = full_sigmas.slice(0, first);
    if (prediction == Prediction::Flow) {
      // the straight line from the data (σ = 0) to the noise (σ = 1); txt2img starts at σ₀ = 1
      x = img2img ? sigmas[0] * noise + (1 - sigmas[0]) * x0 : noise * sigmas[0];
    } else {
      x = img2img ? x0 + noise * sigmas[0] : noise * sigmas[0];
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    NoiseSource step_noise = [&] { return at::randn(noise.sizes(), gen, at::kFloat); };
    switch (sampler) {
      case Sampler::Euler: x = sample_euler(denoise, x, sigmas, callback); break;
      case Sampler::EulerAncestral: x = sample_euler_ancestral(denoise, x, sigmas, step_noise, callback); break;
      case Sampler::Heun: x = sample_heun(denoise, x, sigmas, callback); break;
      case Sampler::DpmPP2M: x = sample_dpmpp_2m(denoise, x, sigmas, callback); break;
      case Sampler::Lcm: x = sample_lcm(denoise, x, sigmas, step_noise, callback); break;
      case Sampler::Ddim: break;
    }
  }
  // and the result keeps the init latent outside the mask (A1111's samples * nmask + init * mask)
  return init.keep.defined() ? x0 * init.keep + x * (1 - init.keep) : x;
}

}  // namespace fp8s
