// Z-Image LoRA files by their names (issue 42, item 6), mapped onto the released transformer's
// weights (original names: attention.qkv, attention.out, feed_forward.w1-3, adaLN_modulation.0,
// x_embedder, final_layer.*, cap_embedder.1, t_embedder.mlp.*):
// - the original names, bare or under `diffusion_model.` / `model.diffusion_model.` / `transformer.`
//   (ComfyUI, kohya's fused `qkv`), and kohya's `lora_unet_<underscored>`;
// - diffusers'/PEFT names (`transformer.`, `diffusion_model.` as ai-toolkit writes them, bare,
//   `lora_unet_`/`lora_transformer_` underscored): attention.to_q/to_k/to_v are the row thirds of
//   qkv (also spelled to.q/to.k/to.v), to_out.0 is out, all_x_embedder.2-1 is x_embedder and
//   all_final_layer.2-1 is final_layer.
// Where a file has a layer twice, a fused qkv or bare out beside the diffusers modules of the same
// weight (diffusers' conversion drops those), the diffusers ones are kept. No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lora/lora_keys.h"

namespace fp8s {

// Module name -> target ("<key>" or "<key>#rows:START:COUNT") for every spelling above, given the
// transformer's 2-D weights (key -> shape).
std::map<std::string, std::string> zimage_lora_key_map(const std::map<std::string, std::vector<int64_t>>& transformer);

// Throws InputError (naming `label`) when no module matches (a LoRA for another model) or a
// module's factors do not fit its rows of the layer.
LoraLayoutPlan plan_zimage_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                       const std::map<std::string, std::string>& metadata,
                                       const std::map<std::string, std::vector<int64_t>>& transformer, const std::string& label);

}  // namespace fp8s
