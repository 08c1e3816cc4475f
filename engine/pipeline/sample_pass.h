// One sampling pass for any family: k-diffusion's samplers (and ldm's DDIM for discrete ε models)
// over the family's denoiser, from noise or from an init latent noised to the first sigma of the
// schedule's tail, with inpainting's latent mask applied to every step's prediction (A1111's
// CFGDenoiser) and to the result.
#pragma once

#include <ATen/ATen.h>

#include "pipeline/family.h"
#include "pipeline/sampling_init.h"
#include "sampling/samplers.h"

namespace fp8s {

// `full_sigmas`: the whole schedule (init.schedule_steps steps for img2img, else the pass's);
// the pass runs its last t_enc + 1 steps for img2img, all of them otherwise. The start is
// noise·σ₀ (+ the init latent) for an ε model, σ₀·noise + (1 − σ₀)·x0 on the flow. Step noise
// (ancestral, LCM) comes from a CPU generator seeded with `seed` (ComfyUI's rule).
at::Tensor sample_pass(const PassDenoiser& model, Prediction prediction, Sampler sampler, const at::Tensor& noise,
                       const at::Tensor& full_sigmas, const SamplingInit& init, uint64_t seed,
                       const StepCallback& callback = {});

}  // namespace fp8s
