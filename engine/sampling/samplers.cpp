#include "sampling/samplers.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace fp8s {

int model_calls(Sampler sampler, int steps) {
  if (sampler == Sampler::Heun) return 2 * steps - 1;
  if (sampler == Sampler::Ddim) return static_cast<int>(ddim_timesteps(steps).size());
  return steps;
}

namespace {

at::Tensor to_d(const at::Tensor& x, const at::Tensor& sigma, const at::Tensor& denoised) {
  return (x - denoised) / sigma;
}

int step_count(const at::Tensor& sigmas) { return static_cast<int>(sigmas.size(0)) - 1; }

}  // namespace

at::Tensor sample_euler(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                        const StepCallback& callback) {
  const int n = step_count(sigmas);
  for (int i = 0; i < n; ++i) {
    auto denoised = model(x, sigmas[i]);
    auto d = to_d(x, sigmas[i], denoised);
    x = x + d * (sigmas[i + 1] - sigmas[i]);
    if (callback) callback(i, n, sigmas[i].item<float>(), x, denoised);
  }
  return x;
}

at::Tensor sample_euler_ancestral(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                                  const NoiseSource& noise, const StepCallback& callback) {
  const int n = step_count(sigmas);
  for (int i = 0; i < n; ++i) {
    auto denoised = model(x, sigmas[i]);
    const auto from = sigmas[i], to = sigmas[i + 1];
    auto sigma_up = at::minimum(to, at::pow(to * to * (from * from - to * to) / (from * from), 0.5));
    auto sigma_down = at::pow(to * to - sigma_up * sigma_up, 0.5);
    auto d = to_d(x, from, denoised);
    x = x + d * (sigma_down - from);
    if (to.item<float>() > 0) x = x + noise() * sigma_up;
    if (callback) callback(i, n, sigmas[i].item<float>(), x, denoised);
  }
  return x;
}

at::Tensor sample_heun(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                       const StepCallback& callback) {
  const int n = step_count(sigmas);
  for (int i = 0; i < n; ++i) {
    auto denoised = model(x, sigmas[i]);
    auto d = to_d(x, sigmas[i], denoised);
    auto dt = sigmas[i + 1] - sigmas[i];
    if (sigmas[i + 1].item<float>() == 0) {
      x = x + d * dt;  // the last step to sigma 0 is plain Euler
    } else {
      auto x2 = x + d * dt;
      auto denoised2 = model(x2, sigmas[i + 1]);
      auto d2 = to_d(x2, sigmas[i + 1], denoised2);
      x = x + (d + d2) / 2 * dt;
    }
    if (callback) callback(i, n, sigmas[i].item<float>(), x, denoised);
  }
  return x;
}

at::Tensor sample_dpmpp_2m(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                           const StepCallback& callback) {
  const int n = step_count(sigmas);
  auto t_fn = [](const at::Tensor& s) { return s.log().neg(); };
  auto sigma_fn = [](const at::Tensor& t) { return t.neg().exp(); };
  at::Tensor old_denoised;
  for (int i = 0; i < n; ++i) {
    auto denoised = model(x, sigmas[i]);
    auto t = t_fn(sigmas[i]), t_next = t_fn(sigmas[i + 1]);
    auto h = t_next - t;
    if (!old_denoised.defined() || sigmas[i + 1].item<float>() == 0) {
      x = (sigma_fn(t_next) / sigma_fn(t)) * x - (-h).expm1() * denoised;
    } else {
      auto h_last = t - t_fn(sigmas[i - 1]);
      auto r = h_last / h;
      auto denoised_d = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * old_denoised;
      x = (sigma_fn(t_next) / sigma_fn(t)) * x - (-h).expm1() * denoised_d;
    }
    old_denoised = denoised;
    if (callback) callback(i, n, sigmas[i].item<float>(), x, denoised);
  }
  return x;
}

at::Tensor sample_lcm(const Denoiser& model, at::Tensor x, const at::Tensor& sigmas,
                      const NoiseSource& noise, const StepCallback& callback) {
  const int n = step_count(sigmas);
  for (int i = 0; i < n; ++i) {
    auto denoised = model(x, sigmas[i]);
    x = denoised;
    if (sigmas[i + 1].item<float>() > 0) x = x + sigmas[i + 1] * noise();
    if (callback) callback(i, n, sigmas[i].item<float>(), x, denoised);
  }
  return x;
}

std::vector<int64_t> ddim_timesteps(int steps, int64_t train_steps) {
  if (steps < 1 || steps > train_steps) {
    throw std::invalid_argument("ddim_timesteps: " + std::to_string(steps) + " steps of " + std::to_string(train_steps));
  }
  const int64_t c = train_steps / steps;
  std::vector<int64_t> ts;
  // + 1 clipped to the last timestep, as A1111's timestep samplers do: when c divides
  // train_steps − 1 (3, 9, 27 or 37 steps of 1000) ldm's list would end at train_steps, past the schedule
  for (int64_t t = 0; t < train_steps; t += c) ts.push_back(std::min(t + 1, train_steps - 1));
  return {ts.rbegin(), ts.rend()};
}

at::Tensor sample_ddim(const EpsModel& model, at::Tensor x, int steps,
                       const at::Tensor& alphas_cumprod, const StepCallback& callback, int first) {
  const auto ts = ddim_timesteps(steps, alphas_cumprod.size(0));
  const int n = static_cast<int>(ts.size());
  for (int i = first; i < n; ++i) {
    const auto a_t = alphas_cumprod[ts[i]];
    const auto a_prev = i + 1 < n ? alphas_cumprod[ts[i + 1]] : alphas_cumprod[0];
    auto eps = model(x, ts[i]);
    auto pred_x0 = (x - at::sqrt(1 - a_t) * eps) / at::sqrt(a_t);
    x = at::sqrt(a_prev) * pred_x0 + at::sqrt(1 - a_prev) * eps;
    if (callback) callback(i - first, n - first, at::sqrt((1 - a_t) / a_t).item<float>(), x, pred_x0);
  }
  return x;
}

}  // namespace fp8s
