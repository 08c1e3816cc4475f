// Qwen-Image LoRA files by their names, mapped onto the transformer's weights. The released
// transformer holds diffusers' names, so every spelling people share is one of them under a prefix:
// bare, `diffusion_model.` / `model.diffusion_model.` (ComfyUI, lightx2v's Lightning LoRAs),
// `transformer.` (diffusers/PEFT), or kohya's `lora_unet_` / `lora_transformer_` with the dots
// underscored. No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lora/lora_keys.h"

namespace fp8s {

// Module name -> "<key>" for every spelling above, given the transformer's 2-D weights (key -> shape).
std::map<std::string, std::string> qwenimage_lora_key_map(const std::map<std::string, std::vector<int64_t>>& transformer);

// Throws InputError (naming `label`) when no module matches (a LoRA for another model) or a
// module's factors do not fit its layer.
LoraLayoutPlan plan_qwenimage_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                          const std::map<std::string, std::string>& metadata,
                                          const std::map<std::string, std::vector<int64_t>>& transformer, const std::string& label);

}  // namespace fp8s
