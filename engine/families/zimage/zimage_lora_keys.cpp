#include "families/zimage/zimage_lora_keys.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/strings.h"

namespace fp8s {
namespace {

// Every spelling of one module name (original or diffusers) people's files use.
void add_spellings(std::map<std::string, std::string>& map, const std::string& module, const std::string& target) {
  for (const char* prefix : {"", "diffusion_model.", "model.diffusion_model.", "transformer."}) map[prefix + module] = target;
  for (const char* prefix : {"lora_unet_", "lora_transformer_"}) map[prefix + lora_underscored(module)] = target;
}

// The block groups' module paths "<group>.<n>." of the transformer's keys.
std::vector<std::string> blocks(const std::map<std::string, std::vector<int64_t>>& t) {
  std::vector<std::string> out;
  for (const auto& [key, shape] : t) {
    const auto at = key.find(".attention.qkv.weight");
    if (at != std::string::npos && ends_with(key, ".attention.qkv.weight")) out.push_back(key.substr(0, at + 1));
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> zimage_lora_key_map(const std::map<std::string, std::vector<int64_t>>& t) {
  std::map<std::string, std::string> map;
  for (const auto& [key, shape] : t) {  // original names
    if (shape.size() == 2 && ends_with(key, ".weight")) add_spellings(map, key.substr(0, key.size() - 7), key);
  }
  for (const auto& b : blocks(t)) {  // diffusers names onto them
    const std::string qkv = b + "attention.qkv.weight";
    const int64_t third = t.at(qkv).at(0) / 3;
    const char* parts[] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i) {
      const std::string rows = lora_rows_target(qkv, i * third, third);
      add_spellings(map, b + "attention.to_" + parts[i], rows);
      add_spellings(map, b + "attention.to." + parts[i], rows);
    }
    if (t.count(b + "attention.out.weight")) add_spellings(map, b + "attention.to_out.0", b + "attention.out.weight");
  }
  static const std::pair<const char*, const char*> globals[] = {
      {"all_x_embedder.2-1", "x_embedder.weight"},
      {"all_final_layer.2-1.linear", "final_layer.linear.weight"},
      {"all_final_layer.2-1.adaLN_modulation.1", "final_layer.adaLN_modulation.1.weight"}};
  for (const auto& [d, key] : globals) {
    if (t.count(key)) add_spellings(map, d, key);
  }
  return map;
}

LoraLayoutPlan plan_zimage_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                       const std::map<std::string, std::string>& metadata,
                                       const std::map<std::string, std::vector<int64_t>>& transformer, const std::string& label) {
  LoraLayoutPlan plan = match_lora_modules(modules, zimage_lora_key_map(transformer));
  if (plan.targets.empty()) {
    refuse_lora_for_model(label, metadata, "Z-Image", 0, modules.size());
  }
  // a weight reached both whole (a fused qkv, a bare out) and by diffusers' modules: theirs count
  std::set<std::string> by_diffusers;
  auto diffusers_module = [](const std::string& name) {
    return name.find(".to_") != std::string::npos || name.find("_to_") != std::string::npos || name.find(".to.") != std::string::npos;
  };
  for (const auto& [m, target] : plan.targets) {
    if (diffusers_module(modules[m].name)) by_diffusers.insert(target.substr(0, target.find('#')));
  }
  std::vector<std::pair<std::size_t, std::string>> kept;
  for (const auto& [m, target] : plan.targets) {
    if (!diffusers_module(modules[m].name) && by_diffusers.count(target.substr(0, target.find('#')))) {
      plan.unmatched.push_back(modules[m].name);  // logged with the unmatched
      continue;
    }
    kept.emplace_back(m, target);
  }
  plan.targets = std::move(kept);
  check_lora_shapes(plan, modules, transformer, label);
  return plan;
}

}  // namespace fp8s
