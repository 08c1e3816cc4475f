#include "families/flux2/flux2_lora_keys.h"

#include "core/strings.h"
#include "lora/flux_lora_keys.h"

namespace fp8s {

std::map<std::string, std::string> flux2_lora_key_map(const std::map<std::string, std::vector<int64_t>>& t) {
  std::map<std::string, std::string> map;
  for (const auto& [key, shape] : t) {  // BFL names
    if (shape.size() != 2 || !ends_with(key, ".weight")) continue;
    const std::string module = key.substr(0, key.size() - 7);
    for (const std::string& name : {module, "diffusion_model." + module, "model.diffusion_model." + module,
                                    "lora_unet_" + lora_underscored(module)}) {
      map[name] = key;
    }
  }
  std::map<std::string, std::string> diffusers;  // diffusers names onto BFL targets
  for (int n : lora_block_indices(t, "double_blocks.", ".img_attn.qkv.weight")) {
    const std::string d = "transformer_blocks." + std::to_string(n) + ".", b = "double_blocks." + std::to_string(n) + ".";
    add_bfl_double_attention_names(diffusers, n, t.at(b + "img_attn.qkv.weight").at(0) / 3);
    diffusers[d + "ff.linear_in"] = b + "img_mlp.0.weight";
    diffusers[d + "ff.linear_out"] = b + "img_mlp.2.weight";
    diffusers[d + "ff_context.linear_in"] = b + "txt_mlp.0.weight";
    diffusers[d + "ff_context.linear_out"] = b + "txt_mlp.2.weight";
  }
  for (int n : lora_block_indices(t, "single_blocks.", ".linear1.weight")) {
    const std::string d = "single_transformer_blocks." + std::to_string(n) + ".", b = "single_blocks." + std::to_string(n) + ".";
    diffusers[d + "attn.to_qkv_mlp_proj"] = b + "linear1.weight";
    diffusers[d + "attn.to_out"] = b + "linear2.weight";
  }
  static const std::pair<const char*, const char*> globals[] = {
      {"x_embedder", "img_in.weight"},
      {"context_embedder", "txt_in.weight"},
      {"time_guidance_embed.timestep_embedder.linear_1", "time_in.in_layer.weight"},
      {"time_guidance_embed.timestep_embedder.linear_2", "time_in.out_layer.weight"},
      {"time_guidance_embed.guidance_embedder.linear_1", "guidance_in.in_layer.weight"},
      {"time_guidance_embed.guidance_embedder.linear_2", "guidance_in.out_layer.weight"},
      {"double_stream_modulation_img.linear", "double_stream_modulation_img.lin.weight"},
      {"double_stream_modulation_txt.linear", "double_stream_modulation_txt.lin.weight"},
      {"single_stream_modulation.linear", "single_stream_modulation.lin.weight"},
      {"proj_out", "final_layer.linear.weight"}};
  for (const auto& [d, b] : globals) {
    if (t.count(b)) diffusers[d] = b;
  }
  if (t.count("final_layer.adaLN_modulation.1.weight")) diffusers["norm_out.linear"] = "final_layer.adaLN_modulation.1.weight#swap";
  for (const auto& [d, target] : diffusers) {
    for (const char* prefix : {"", "transformer.", "diffusion_model."}) map[prefix + d] = target;
    map["lora_transformer_" + lora_underscored(d)] = target;
  }
  return map;
}

LoraLayoutPlan plan_flux2_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                      const std::map<std::string, std::string>& metadata,
                                      const std::map<std::string, std::vector<int64_t>>& transformer, const std::string& label) {
  const LoraLayoutPlan plan = match_lora_modules(modules, flux2_lora_key_map(transformer));
  if (plan.targets.empty()) refuse_lora_for_model(label, metadata, "FLUX.2", 0, modules.size());
  check_lora_shapes(plan, modules, transformer, label);
  return plan;
}

}  // namespace fp8s
