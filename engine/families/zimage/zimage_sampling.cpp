#include "families/zimage/zimage_sampling.h"

#include <algorithm>

#include "core/error.h"
#include "families/zimage/zimage_transformer.h"

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

at::Tensor zimage_sample(ZImageTransformerImpl& model, const at::Tensor& noise, const at::Tensor& cap, const at::Tensor& neg,
                         const at::Tensor& init, const ZImageSampling& s, at::ScalarType compute) {
  const auto sigmas = zimage_sigmas(s.steps, s.shift);
  const bool cfg = s.cfg > 1.0;
  if (cfg && !neg.defined()) throw InputError("Z-Image: CFG above 1 needs the negative prompt's features");
  const int start = init.defined() ? zimage_start_step(s.steps, s.strength) : 0;
  at::Tensor x = noise.to(at::kFloat);
  if (init.defined()) x = sigmas[start] * x + (1.0f - sigmas[start]) * init.to(at::kFloat);
  auto call = [&](const at::Tensor& c, const at::Tensor& t) { return model.forward(x, t, c, {c.size(1)}, compute); };
  for (int i = start; i < s.steps; ++i) {
    // the scheduler's timestep T = 1000·σ (FP32); the transformer's t = (1000 − T) / 1000
    const float T = sigmas[i] * 1000.0f;
    const auto t = at::full({1}, (1000.0f - T) / 1000.0f, at::kFloat);
    at::Tensor pred = call(cap, t);
    if (cfg && (1000.0f - T) / 1000.0f <= s.cfg_truncation) pred = zimage_guidance(pred, call(neg, t), s.cfg - 1.0, s.cfg_norm);
    x = x + (sigmas[i + 1] - sigmas[i]) * (-pred);
  }
  return x;
}

}  // namespace fp8s
