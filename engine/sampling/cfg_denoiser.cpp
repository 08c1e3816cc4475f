#include "sampling/cfg_denoiser.h"

namespace fp8s {

at::Tensor CfgDenoiser::eps(const at::Tensor& x, const at::Tensor& t) const {
  const int64_t b = x.size(0);
  if (!uses_cfg()) return unet_(x, t.expand({b}));
  auto both = unet_(at::cat({x, x}), t.expand({2 * b})).chunk(2);
  return both[0] + (both[1] - both[0]) * scale_;
}

EpsModel CfgDenoiser::eps_model() const {
  return [this](const at::Tensor& x, int64_t t) { return eps(x, at::full({1}, static_cast<double>(t), at::kFloat)); };
}

Denoiser CfgDenoiser::denoiser(const DiscreteSchedule& schedule) const {
  return [this, &schedule](const at::Tensor& x, const at::Tensor& sigma) {
    auto c_in = 1 / at::pow(sigma * sigma + 1, 0.5);
    return x + eps(x * c_in, schedule.sigma_to_t(sigma)) * (-sigma);
  };
}

}  // namespace fp8s
