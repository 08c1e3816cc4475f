#include "sampling/schedule.h"

#include <cmath>

namespace fp8s {

DiscreteSchedule::DiscreteSchedule() {
  auto betas = at::pow(at::linspace(std::sqrt(0.00085), std::sqrt(0.012), 1000, at::kDouble), 2);
  alphas_cumprod_ = at::cumprod(1.0 - betas, 0).to(at::kFloat);
  // k-diffusion computes sigmas in the F32 of the stored alphas_cumprod.
  sigmas_ = at::pow((1 - alphas_cumprod_) / alphas_cumprod_, 0.5);
  log_sigmas_ = sigmas_.log();
}

float DiscreteSchedule::sigma_min() const { return sigmas_[0].item<float>(); }
float DiscreteSchedule::sigma_max() const { return sigmas_[-1].item<float>(); }

at::Tensor DiscreteSchedule::sigma_to_t(const at::Tensor& sigma) const {
  auto log_sigma = sigma.to(at::kFloat).reshape({-1}).log();
  auto dists = log_sigma.unsqueeze(0) - log_sigmas_.unsqueeze(1);
  auto low_idx = dists.ge(0).cumsum(0).argmax(0).clamp_max(log_sigmas_.size(0) - 2);
  auto high_idx = low_idx + 1;
  auto low = log_sigmas_.index_select(0, low_idx), high = log_sigmas_.index_select(0, high_idx);
  auto w = ((low - log_sigma) / (low - high)).clamp(0, 1);
  return (1 - w) * low_idx + w * high_idx;
}

at::Tensor DiscreteSchedule::t_to_sigma(const at::Tensor& t_in) const {
  auto t = t_in.to(at::kFloat);
  auto low_idx = t.floor().to(at::kLong), high_idx = t.ceil().to(at::kLong);
  auto w = t.frac();
  auto log_sigma = (1 - w) * log_sigmas_.index_select(0, low_idx.reshape({-1})).reshape(t.sizes()) +
                   w * log_sigmas_.index_select(0, high_idx.reshape({-1})).reshape(t.sizes());
  return log_sigma.exp();
}

at::Tensor DiscreteSchedule::get_sigmas(Schedule schedule, int steps) const {
  at::Tensor sigmas;
  if (schedule == Schedule::Normal) {
    sigmas = t_to_sigma(at::linspace(static_cast<double>(sigmas_.size(0) - 1), 0.0, steps, at::kFloat));
  } else {
    const double rho = 7.0;
    const double min_inv_rho = std::pow(static_cast<double>(sigma_min()), 1.0 / rho);
    const double max_inv_rho = std::pow(static_cast<double>(sigma_max()), 1.0 / rho);
    auto ramp = at::linspace(0.0, 1.0, steps, at::kFloat);
    sigmas = at::pow(max_inv_rho + ramp * (min_inv_rho - max_inv_rho), rho);
  }
  return at::cat({sigmas, at::zeros({1}, at::kFloat)});
}

}  // namespace fp8s
