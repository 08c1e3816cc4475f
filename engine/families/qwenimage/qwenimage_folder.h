// A Qwen-Image diffusers folder (`Qwen/Qwen-Image` as downloaded) read as the released files
// (../shared/reference/qwenimage/README.md): transformer/ already has the released names; its
// text_encoder/ holds transformers 5's Qwen2_5_VLForConditionalGeneration names
// (`model.language_model.*`, `model.visual.*`), read as the original checkpoint's (`model.*`,
// `visual.*`); its vae/ holds AutoencoderKLQwenImage's names, read as the Wan 2.1 VAE's (the
// inverse of diffusers' convert_wan_vae_to_diffusers). LibTorch-free.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace fp8s {

std::optional<std::vector<FolderTensor>> qwen25vl_transformers_names(const std::map<std::string, TensorRecord>& tensors);
std::optional<std::vector<FolderTensor>> qwenimage_vae_diffusers_names(const std::map<std::string, TensorRecord>& tensors);
// One AutoencoderKLQwenImage name as the Wan 2.1 VAE's ("" when it is not one of its names).
std::string qwenimage_vae_released_name(const std::string& diffusers_name);

}  // namespace fp8s
