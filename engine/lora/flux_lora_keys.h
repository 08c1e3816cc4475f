// Flux LoRA files by their names: kohya (lora_unet_<BFL path>, lora_te1_<CLIP-L HF path>), BFL's own
// (<BFL path> or diffusion_model.<BFL path>, lora_A/lora_B) and diffusers/PEFT
// (transformer.<diffusers path>, lora_transformer_<diffusers path>) mapped onto the BFL transformer's
// and CLIP-L's weights. Diffusers splits BFL's fused layers: to_q/to_k/to_v are the row thirds of
// img_attn.qkv (add_*_proj of txt_attn.qkv), and a single block's to_q/to_k/to_v/proj_mlp the row
// slices [H, H, H, mlp] of linear1. No LibTorch (the fuzz target links it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lora/lora_keys.h"

namespace fp8s {

// A target key of CLIP-L's starts with this (then its HF key under the component's prefix); the
// transformer's are its BFL keys as they are.
inline constexpr const char* kFluxClipLoraTarget = "clip_l:";

// The Linear weights a Flux LoRA can reach: key (no file prefix) -> shape.
struct FluxLoraLayers {
  std::map<std::string, std::vector<int64_t>> transformer, clip_l;
};

// The diffusers names of BFL double block `n`'s attention, Flux.1's and FLUX.2's alike:
// transformer_blocks.N.attn.to_q/to_k/to_v the row thirds of img_attn.qkv (add_q/k/v_proj of
// txt_attn.qkv, each `h` rows), to_out.0 img_attn.proj and to_add_out txt_attn.proj.
void add_bfl_double_attention_names(std::map<std::string, std::string>& diffusers, int n, int64_t h);

// Module name -> target ("<key>", "<key>#rows:START:COUNT", "<key>#swap"; CLIP-L's prefixed
// kFluxClipLoraTarget) for every spelling above.
std::map<std::string, std::string> flux_lora_key_map(const FluxLoraLayers& layers);

// Throws InputError when nothing matches (an SD LoRA on a Flux model, say) or a module's factors do
// not fit its rows of the layer.
LoraLayoutPlan plan_flux_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                     const std::map<std::string, std::string>& metadata, const FluxLoraLayers& layers,
                                     const std::string& label);

}  // namespace fp8s
