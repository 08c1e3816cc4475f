// LoRA files (kohya LoRA/LoCon, diffusers/PEFT names): reading, mapping their module names onto
// checkpoint keys, and the weight delta each one adds.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lora/lora_keys.h"
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

// Reads a LoRA file: its layout checked by lora_modules() before any data is read, then the factors
// as FP32. Throws InputError for unsupported kinds (LoHa, LoKr, DoRA, ...), malformed modules and a
// non-finite alpha, naming the file and the module.
LoraFile read_lora(const std::string& path);

// A LoRA resolved against a model: each module's target key, plus what did not match.
struct LoraPlan {
  std::vector<std::pair<const LoraModule*, std::string>> targets;  // module -> checkpoint key
  std::vector<std::string> unmatched;
};
// Throws InputError when nothing matches, the LoRA was made for another architecture, or a module's
// shapes do not fit its layer (plan_lora_layout); logs the unmatched modules.
LoraPlan plan_lora(const LoraFile& lora, const ModelConfig& config);
// The same for any model family: `plan_layout` maps the file's module layouts (names and shapes)
// onto the family's layers (plan_lora_layout for SD, plan_flux_lora_layout for Flux).
LoraPlan plan_lora_with(const LoraFile& lora,
                        const std::function<LoraLayoutPlan(const std::vector<LoraModuleLayout>&)>& plan_layout);

}  // namespace fp8s
