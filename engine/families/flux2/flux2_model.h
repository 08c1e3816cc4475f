// FLUX.2 generation (families/flux2/flux2_family.h): klein's Qwen3 through its template (512 tokens,
// right-padded) or dev's Mistral through its system prompt (left-padded, Tekken), three hidden
// states each; the transformer sampled with FLUX.2's schedule, reference images for an edit
// (--ref-image), and the autoencoder. The three parts are a component set (families/component_set.h):
// each loaded when first used, in the request's storage (the autoencoder in its own 16-bit type
// unless --fp8-vae), the phases taking turns where they do not fit together, the transformer's and
// the text encoder's blocks streamed under a weight budget.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/engine.h"
#include "pipeline/family.h"

namespace fp8s {

// The transformer's prefix in a file: BFL's names bare (ComfyUI's diffusion_models/) or under
// model.diffusion_model. (an all-in-one file); nullopt when the file holds no FLUX.2 transformer.
std::optional<std::string> flux2_prefix(const SafetensorsFile& file);
// FLUX.2's settings: dev's distilled guidance, and the reference images of an edit.
std::vector<FamilyOption> flux2_options(bool dev);
std::vector<ComponentRole> flux2_roles();
// The traits of a FLUX.2 transformer under `prefix` with an autoencoder downsampling `ae_factor`.
FamilyTraits flux2_model_traits(const SafetensorsFile& transformer, const std::string& prefix, int ae_factor);
// FLUX.2's text encoder in a file: Qwen3 (klein) or, with `mistral`, Mistral Small 3.2 (dev; no
// q/k norm, eps 1e-5, theta 1e9, head_dim from mistral3.config or 128), each the concatenation of
// three hidden states (9/18/27, 10/20/30) before any final norm.
struct DecoderLmConfig;
DecoderLmConfig flux2_text_config(const SafetensorsFile& file, bool mistral);
// The weight bytes a load of `options` would hold in `storage`, from the headers (its components
// found as a load finds them).
WeightBytes flux2_estimate(const LoadOptions& options, const StorageSpec& storage);
// inspect --weight-budget: the transformer's residency plan as a load under `budget` makes it.
ResidencyPlan flux2_plan(const LoadOptions& options, const StorageSpec& storage, uint64_t budget);
std::unique_ptr<FamilyModel> open_flux2(const LoadOptions& options, const at::Device& device);

}  // namespace fp8s
