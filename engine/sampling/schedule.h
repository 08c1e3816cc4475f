// The discrete scaled-linear diffusion schedule and k-diffusion's sigma schedules.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "core/types.h"

namespace fp8s {


// ldm's schedule: betas = linspace(sqrt(0.00085), sqrt(0.012), 1000)^2 (float64), stored F32.
class DiscreteSchedule {
 public:
  DiscreteSchedule();
  const at::Tensor& alphas_cumprod() const { return alphas_cumprod_; }  // [1000] F32
  const at::Tensor& sigmas() const { return sigmas_; }                  // [1000] F32
  float sigma_min() const;
  float sigma_max() const;
  // k-diffusion CompVisDenoiser.sigma_to_t (quantize=False): fractional timestep, as a [1] tensor.
  at::Tensor sigma_to_t(const at::Tensor& sigma) const;
  at::Tensor t_to_sigma(const at::Tensor& t) const;
  // n sampling sigmas followed by 0 (n + 1 values, F32).
  at::Tensor get_sigmas(Schedule schedule, int steps) const;

 private:
  at::Tensor alphas_cumprod_, sigmas_, log_sigmas_;
};

}  // namespace fp8s
