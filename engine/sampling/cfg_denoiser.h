// The denoisers the samplers call, built over a UNet: classifier-free guidance (A1111's
// CFGDenoiser: one batched call on [x; x] with [uncond; cond]) and k-diffusion's CompVisDenoiser
// (eps-prediction model -> denoised at a sigma).
#pragma once

#include <ATen/ATen.h>

#include <functional>

#include "sampling/samplers.h"
#include "sampling/schedule.h"

namespace fp8s {

// The network: eps for x [N,...] at timesteps t [N] (N = the batch, or twice it with CFG).
using UNetCall = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& t)>;

// eps = uncond + (cond - uncond) * scale from one call on the doubled batch (the network's first
// half is unconditional); a scale of 1 calls the network once on the batch alone.
class CfgDenoiser {
 public:
  CfgDenoiser(UNetCall unet, float scale) : unet_(std::move(unet)), scale_(scale) {}
  bool uses_cfg() const { return scale_ != 1.0f; }
  // eps at timestep t (a one-element tensor) for x [B,...].
  at::Tensor eps(const at::Tensor& x, const at::Tensor& t) const;
  // DDIM's integer-timestep form.
  EpsModel eps_model() const;
  // k-diffusion CompVisDenoiser: denoised = x - sigma * eps(x / sqrt(sigma^2 + 1), t(sigma)).
  Denoiser denoiser(const DiscreteSchedule& schedule) const;

 private:
  UNetCall unet_;
  float scale_;
};

}  // namespace fp8s
