#include "families/qwenimage/qwenimage_lora_keys.h"

#include "core/strings.h"

namespace fp8s {

std::map<std::string, std::string> qwenimage_lora_key_map(const std::map<std::string, std::vector<int64_t>>& t) {
  std::map<std::string, std::string> map;
  for (const auto& [key, shape] : t) {
    if (shape.size() != 2 || !ends_with(key, ".weight")) continue;
    const std::string module = key.substr(0, key.size() - 7);
    for (const char* prefix : {"", "diffusion_model.", "model.diffusion_model.", "transformer."}) map[prefix + module] = key;
    for (const char* prefix : {"lora_unet_", "lora_transformer_"}) map[prefix + lora_underscored(module)] = key;
  }
  return map;
}

LoraLayoutPlan plan_qwenimage_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                          const std::map<std::string, std::string>& metadata,
                                          const std::map<std::string, std::vector<int64_t>>& transformer, const std::string& label) {
  LoraLayoutPlan plan = match_lora_modules(modules, qwenimage_lora_key_map(transformer));
  if (plan.targets.empty()) refuse_lora_for_model(label, metadata, "Qwen-Image", 0, modules.size());
  check_lora_shapes(plan, modules, transformer, label);
  return plan;
}

}  // namespace fp8s
