// FLUX.2 [klein] generation (families/flux2/flux2_family.h): the Qwen3 text encoder through klein's
// template (512 tokens, right-padded, three hidden states), the transformer sampled with FLUX.2's
// schedule, reference images for an edit (--ref-image), and the autoencoder. Every part loaded at
// open, in the request's storage (the autoencoder in its own 16-bit type unless --fp8-vae).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pipeline/engine.h"
#include "pipeline/family.h"

namespace fp8s {

// FLUX.2's settings: dev's distilled guidance, and the reference images of an edit.
std::vector<FamilyOption> flux2_options(bool dev);
std::vector<ComponentRole> flux2_roles();
// The traits of a FLUX.2 transformer under `prefix` with an autoencoder downsampling `ae_factor`.
FamilyTraits flux2_model_traits(const SafetensorsFile& transformer, const std::string& prefix, int ae_factor);
std::unique_ptr<FamilyModel> open_flux2(const LoadOptions& options, const at::Device& device);

}  // namespace fp8s
