#include "families/flux2/flux2_sampling.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "models/flux2/flux2.h"
#include "pipeline/sample_pass.h"

namespace fp8s {

double flux2_mu(int64_t tokens, int steps) {
  const double a1 = 8.73809524e-05, b1 = 1.89833333, a2 = 0.00016927, b2 = 0.45666666;
  const double n = static_cast<double>(tokens);
  if (n > 4300) return a2 * n + b2;
  const double m200 = a2 * n + b2, m10 = a1 * n + b1;
  const double a = (m200 - m10) / 190.0, b = m200 - 200.0 * a;
  return a * steps + b;
}

std::vector<float> flux2_sigmas(int steps, int64_t tokens) {
  if (steps < 1) throw InputError("FLUX.2: steps must be at least 1");
  const auto s = at::linspace(1.0, 1.0 / steps, steps, at::kDouble).to(at::kFloat);
  const float e = static_cast<float>(std::exp(flux2_mu(tokens, steps)));
  const auto sigma = (e / (e + (1.0f / s - 1.0f))).contiguous();
  std::vector<float> out(sigma.data_ptr<float>(), sigma.data_ptr<float>() + steps);
  out.push_back(0.0f);
  return out;
}

at::Tensor flux2_tokens(const at::Tensor& grid) { return grid.flatten(2).transpose(1, 2); }

at::Tensor flux2_grid(const at::Tensor& tokens, int64_t h, int64_t w) {
  return tokens.transpose(1, 2).reshape({tokens.size(0), tokens.size(2), h, w});
}

at::Tensor flux2_grid_ids(int64_t h, int64_t w, int64_t t) {
  const auto i = at::arange(h, at::kLong).view({h, 1}).expand({h, w}).reshape({-1});
  const auto j = at::arange(w, at::kLong).view({1, w}).expand({h, w}).reshape({-1});
  return at::stack({at::full({h * w}, t, at::kLong), i, j, at::zeros({h * w}, at::kLong)}, 1);
}

at::Tensor flux2_text_ids(int64_t L) {
  auto ids = at::zeros({L, 4}, at::kLong);
  ids.select(1, 3).copy_(at::arange(L, at::kLong));
  return ids;
}

PassDenoiser flux2_denoiser(Flux2Impl& model, const at::Tensor& txt, const at::Tensor& neg, const Flux2Guidance& guidance,
                            const std::vector<at::Tensor>& refs, at::ScalarType compute,
                            const std::function<void(double)>& on_model_ms) {
  // the reference tokens and their ids (t = 10, 20, ...), fixed for the whole run
  std::vector<at::Tensor> ref_tokens, ref_ids;
  for (std::size_t k = 0; k < refs.size(); ++k) {
    ref_tokens.push_back(flux2_tokens(refs[k].to(at::kFloat)));
    ref_ids.push_back(flux2_grid_ids(refs[k].size(2), refs[k].size(3), 10 * static_cast<int64_t>(k + 1)));
  }
  const bool cfg = guidance.cfg > 1.0 && neg.defined();
  Flux2Impl* m = &model;
  PassDenoiser d;
  d.denoise = [=](const at::Tensor& x, const at::Tensor& sigma) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t B = x.size(0), h = x.size(2), w = x.size(3), n = h * w;
    std::vector<at::Tensor> tokens{flux2_tokens(x)}, ids{flux2_grid_ids(h, w, 0)};
    for (std::size_t k = 0; k < ref_tokens.size(); ++k) {
      tokens.push_back(ref_tokens[k].expand({B, -1, -1}));
      ids.push_back(ref_ids[k]);
    }
    const auto img = at::cat(tokens, 1), img_ids = at::cat(ids, 0);
    // the scheduler's timestep T = 1000·σ, the transformer's t = T / 1000 (FP32)
    const auto t = at::full({B}, sigma.item<float>() * 1000.0f / 1000.0f, at::kFloat);
    const auto g = guidance.distilled ? at::full({B}, *guidance.distilled, at::kFloat) : at::Tensor();
    auto call = [&](const at::Tensor& text) {
      return m->forward(img, img_ids, text.expand({B, -1, -1}), flux2_text_ids(text.size(1)), t, g, compute)
          .narrow(1, 0, n)
          .to(at::kCPU, at::kFloat);
    };
    at::Tensor v = call(txt);
    if (cfg) {
      const auto u = call(neg);
      v = u + guidance.cfg * (v - u);
    }
    if (on_model_ms) on_model_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    return x - sigma * flux2_grid(v, h, w);
  };
  return d;
}

at::Tensor flux2_sample(Flux2Impl& model, const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& neg,
                        const std::vector<at::Tensor>& refs, const at::Tensor& init, int steps, double strength,
                        const Flux2Guidance& guidance, at::ScalarType compute) {
  const auto sigmas = at::tensor(flux2_sigmas(steps, noise.size(2) * noise.size(3)), at::kFloat);
  SamplingInit start;
  std::vector<at::Tensor> all_refs = refs;
  if (init.defined()) {
    if (!(strength > 0 && strength <= 1)) throw InputError("FLUX.2: the img2img strength must be in (0, 1]");
    const int t_start = static_cast<int>(std::max(steps - std::min(steps * strength, static_cast<double>(steps)), 0.0));
    start.latent = init.to(at::kFloat);
    start.schedule_steps = steps;
    start.t_enc = steps - t_start - 1;
    all_refs.push_back(init);  // Flux2KleinInpaintPipeline: the init image is also a reference
  }
  return sample_pass(flux2_denoiser(model, txt, neg, guidance, all_refs, compute, {}), Prediction::Flow, Sampler::Euler,
                     noise.to(at::kFloat), sigmas, start, 0);
}

}  // namespace fp8s
