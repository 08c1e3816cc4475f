// LoRA files (kohya LoRA/LoCon, diffusers/PEFT names): reading, mapping their module names onto
// checkpoint keys, and the weight delta each one adds.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "lora/lora_library.h"
#include "models/architecture.h"

namespace fp8s {

struct LoraModule {
  std::string name;    // as in the file, e.g. lora_unet_down_blocks_0_resnets_0_conv1
  at::Tensor down;     // [r, in] or [r, in, kh, kw], FP32
  at::Tensor up;       // [out, r] or [out, r, 1, 1], FP32
  double alpha = 0;    // defaults to the rank
  int64_t rank() const { return down.size(0); }
  // ΔW = multiplier · (alpha / rank) · up @ down, shaped like a weight of `shape`.
  at::Tensor delta(double multiplier, at::IntArrayRef shape) const;
};

struct LoraFile {
  std::string path;
  std::map<std::string, std::string> metadata;
  std::vector<LoraModule> modules;
};

// Reads a LoRA file. Throws InputError for unsupported kinds (LoHa, LoKr, DoRA, ...), naming the kind.
LoraFile read_lora(const std::string& path);

// kohya module name -> checkpoint weight key, for every Linear/Conv2d of `config`'s UNet and text
// encoders (SD1: lora_unet_*, lora_te_*; SDXL: lora_te1_*, lora_te2_*). Diffusers/PEFT names are
// translated to kohya names by `kohya_name_of`.
std::map<std::string, std::string> lora_key_map(const ModelConfig& config);
std::string kohya_name_of(const std::string& lora_key_stem);

// The diffusers module path of an ldm UNet module path (e.g. input_blocks.1.0.in_layers.2 ->
// down_blocks.0.resnets.0.conv1), given the config's num_res_blocks.
std::string ldm_to_diffusers_unet(const std::string& ldm_module, const UNetConfig& config);

// A LoRA resolved against a model: each module's target key, plus what did not match.
struct LoraPlan {
  std::vector<std::pair<const LoraModule*, std::string>> targets;  // module -> checkpoint key
  std::vector<std::string> unmatched;
};
// Throws InputError when nothing matches or the LoRA was made for another architecture.
LoraPlan plan_lora(const LoraFile& lora, const ModelConfig& config);

}  // namespace fp8s
