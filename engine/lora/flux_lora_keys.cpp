#include "lora/flux_lora_keys.h"

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"

namespace fp8s {


void add_bfl_double_attention_names(std::map<std::string, std::string>& diffusers, int n, int64_t h) {
  const std::string d = "transformer_blocks." + std::to_string(n) + ".", b = "double_blocks." + std::to_string(n) + ".";
  const char* qkv[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    diffusers[d + "attn.to_" + qkv[i]] = lora_rows_target(b + "img_attn.qkv.weight", i * h, h);
    diffusers[d + "attn.add_" + qkv[i] + "_proj"] = lora_rows_target(b + "txt_attn.qkv.weight", i * h, h);
  }
  diffusers[d + "attn.to_out.0"] = b + "img_attn.proj.weight";
  diffusers[d + "attn.to_add_out"] = b + "txt_attn.proj.weight";
}

std::map<std::string, std::string> flux_lora_key_map(const FluxLoraLayers& layers) {
  std::map<std::string, std::string> map;
  const auto& t = layers.transformer;
  // BFL names, as kohya, BFL and ComfyUI spell them
  for (const auto& [key, shape] : t) {
    if (shape.size() != 2 || !ends_with(key, ".weight")) continue;
    const std::string module = key.substr(0, key.size() - 7);
    for (const std::string& name : {"lora_unet_" + lora_underscored(module), module, "diffusion_model." + module,
                                    "model.diffusion_model." + module}) {
      map[name] = key;
    }
  }
  // diffusers names onto BFL targets
  std::map<std::string, std::string> diffusers;
  const auto img_in = t.find("img_in.weight");
  const int64_t h = img_in != t.end() ? img_in->second.at(0) : 0;
  for (int n : lora_block_indices(t, "double_blocks.", ".img_attn.qkv.weight")) {
    const std::string d = "transformer_blocks." + std::to_string(n) + ".", b = "double_blocks." + std::to_string(n) + ".";
    add_bfl_double_attention_names(diffusers, n, h);
    diffusers[d + "ff.net.0.proj"] = b + "img_mlp.0.weight";
    diffusers[d + "ff.net.2"] = b + "img_mlp.2.weight";
    diffusers[d + "ff_context.net.0.proj"] = b + "txt_mlp.0.weight";
    diffusers[d + "ff_context.net.2"] = b + "txt_mlp.2.weight";
    diffusers[d + "norm1.linear"] = b + "img_mod.lin.weight";
    diffusers[d + "norm1_context.linear"] = b + "txt_mod.lin.weight";
  }
  for (int n : lora_block_indices(t, "single_blocks.", ".linear1.weight")) {
    const std::string d = "single_transformer_blocks." + std::to_string(n) + ".", b = "single_blocks." + std::to_string(n) + ".";
    const int64_t mlp = t.at(b + "linear1.weight").at(0) - 3 * h;
    diffusers[d + "attn.to_q"] = lora_rows_target(b + "linear1.weight", 0, h);
    diffusers[d + "attn.to_k"] = lora_rows_target(b + "linear1.weight", h, h);
    diffusers[d + "attn.to_v"] = lora_rows_target(b + "linear1.weight", 2 * h, h);
    diffusers[d + "proj_mlp"] = lora_rows_target(b + "linear1.weight", 3 * h, mlp);
    diffusers[d + "proj_out"] = b + "linear2.weight";
    diffusers[d + "norm.linear"] = b + "modulation.lin.weight";
  }
  static const std::pair<const char*, const char*> globals[] = {
      {"x_embedder", "img_in.weight"},
      {"context_embedder", "txt_in.weight"},
      {"time_text_embed.timestep_embedder.linear_1", "time_in.in_layer.weight"},
      {"time_text_embed.timestep_embedder.linear_2", "time_in.out_layer.weight"},
      {"time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer.weight"},
      {"time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer.weight"},
      {"time_text_embed.text_embedder.linear_1", "vector_in.in_layer.weight"},
      {"time_text_embed.text_embedder.linear_2", "vector_in.out_layer.weight"},
      {"proj_out", "final_layer.linear.weight"}};
  for (const auto& [d, b] : globals) {
    if (t.count(b)) diffusers[d] = b;
  }
  if (t.count("final_layer.adaLN_modulation.1.weight")) diffusers["norm_out.linear"] = "final_layer.adaLN_modulation.1.weight#swap";
  for (const auto& [d, target] : diffusers) {
    map["transformer." + d] = target;
    map["lora_transformer_" + lora_underscored(d)] = target;
  }
  // CLIP-L: kohya's lora_te1_ (Flux trainers) and lora_te_ (diffusers' text_encoder.)
  for (const auto& [key, shape] : layers.clip_l) {
    if (shape.size() != 2 || !ends_with(key, ".weight")) continue;
    const std::string module = "text_model." + key.substr(0, key.size() - 7);
    for (const char* tag : {"lora_te1_", "lora_te_"}) map[tag + lora_underscored(module)] = kFluxClipLoraTarget + key;
  }
  return map;
}

LoraLayoutPlan plan_flux_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                     const std::map<std::string, std::string>& metadata, const FluxLoraLayers& layers,
                                     const std::string& label) {
  const LoraLayoutPlan plan = match_lora_modules(modules, flux_lora_key_map(layers));
  // an SD LoRA's text-encoder part can match CLIP-L (SD 1.x's encoder is CLIP-L too): a file whose
  // UNet modules all miss the transformer was made for SD
  const auto transformer_hits = std::count_if(plan.targets.begin(), plan.targets.end(),
                                              [](const auto& t) { return !starts_with(t.second, kFluxClipLoraTarget); });
  const bool sd_unet = std::any_of(plan.unmatched.begin(), plan.unmatched.end(),
                                   [](const std::string& n) { return starts_with(n, "lora_unet_"); });
  if (plan.targets.empty() || (transformer_hits == 0 && sd_unet)) {
    refuse_lora_for_model(label, metadata, "Flux", static_cast<std::size_t>(transformer_hits), modules.size());
  }
  std::map<std::string, std::vector<int64_t>> shapes = layers.transformer;
  for (const auto& [key, shape] : layers.clip_l) shapes[kFluxClipLoraTarget + key] = shape;
  check_lora_shapes(plan, modules, shapes, label);
  return plan;
}

}  // namespace fp8s
