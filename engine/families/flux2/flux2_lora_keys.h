// FLUX.2 LoRA files by their names, mapped onto the released transformer's weights (BFL names):
// - BFL's names bare or under `diffusion_model.` (ai-toolkit, ComfyUI) / `model.diffusion_model.`,
//   and kohya's `lora_unet_<underscored>`;
// - diffusers'/PEFT names (`Flux2Transformer2DModel`) under `transformer.`, `diffusion_model.` or
//   bare, and `lora_transformer_<underscored>`: a double block's attn.to_q/to_k/to_v are the row
//   thirds of img_attn.qkv (add_q/k/v_proj of txt_attn.qkv), to_out.0 / to_add_out the
//   projections, ff(_context).linear_in/out the MLPs; a single block's attn.to_qkv_mlp_proj is
//   linear1 and attn.to_out linear2; x_embedder, context_embedder, time_guidance_embed.*,
//   the shared modulations' `.linear`, proj_out, and norm_out.linear (the final adaLN with its
//   shift and scale halves swapped).
// No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lora/lora_keys.h"

namespace fp8s {

// Module name -> target ("<key>", "<key>#rows:START:COUNT", "<key>#swap") for every spelling above,
// given the transformer's 2-D weights (key -> shape).
std::map<std::string, std::string> flux2_lora_key_map(const std::map<std::string, std::vector<int64_t>>& transformer);

// Throws InputError (naming `label`) when no module matches (a LoRA for another model) or a
// module's factors do not fit its rows of the layer.
LoraLayoutPlan plan_flux2_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                      const std::map<std::string, std::string>& metadata,
                                      const std::map<std::string, std::vector<int64_t>>& transformer, const std::string& label);

}  // namespace fp8s
