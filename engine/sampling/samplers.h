// Samplers as small free functions over a denoiser, with k-diffusion's semantics (and ldm's DDIM).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <string>

#include "sampling/schedule.h"

namespace fp8s {


// denoised = D(x, sigma); sigma is a 0-d F32 tensor.
using Denoiser = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& sigma)>;
// eps = E(x, t) at an integer timestep (DDIM's VP-form model).
using EpsModel = std::function<at::Tensor(const at::Tensor& x, int64_t t)>;
// Called after each step with the step index (0-based), the count, the sigma the step started from
// (k-diffusion's `sigma`; DDIM: the VP timestep's sqrt((1 - a_t) / a_t)), the new x and the step's
// denoised prediction.
using StepCallback = std::function<void(int step, int steps, float sigma, const at::Tensor& x,
                                        const at::Tensor& denoised)>;
// Draws the next step noise (ancestral samplers, LCM).
using NoiseSource = std::function<at::Tensor()>;

at::Tensor sample_euler(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                        const StepCallback& callback = {});
at::Tensor sample_euler_ancestral(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                                  const NoiseSource& noise, const StepCallback& callback = {});
at::Tensor sample_heun(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                       const StepCallback& callback = {});
at::Tensor sample_dpmpp_2m(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                           const StepCallback& callback = {});
at::Tensor sample_lcm(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                      const NoiseSource& noise, const StepCallback& callback = {});
// ldm's DDIMSampler (eta 0, uniform discretisation), starting from x_T = noise; `first` > 0 skips
// that many of the timesteps (img2img: x is then the init latent noised to timestep first).
at::Tensor sample_ddim(const EpsModel& model, at::Tensor x, int steps,
                       const at::Tensor& alphas_cumprod, const StepCallback& callback = {}, int first = 0);
// ldm's uniform DDIM timesteps, in visiting order (e.g. 6 steps: 997, 831, ..., 1), the last
// timestep at most train_steps − 1 (A1111's clip; 3 steps: 999, 667, 334, 1).
std::vector<int64_t> ddim_timesteps(int steps, int64_t train_steps = 1000);

// UNet evaluations a run of `sampler` with `steps` steps needs (for progress and estimates).
int model_calls(Sampler sampler, int steps);

}  // namespace fp8s
