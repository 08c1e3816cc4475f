// The released SD 1.5 / SDXL base configurations and the tiny reference ones.
#include "models/config.h"

namespace fp8s {
namespace {

TextEncoderConfig clip_l(const std::string& prefix) {
  TextEncoderConfig t;
  t.name = "clip_l";
  t.prefix = prefix;
  t.hidden_state_index = 12;
  return t;
}

}  // namespace

void resize_text_encoder(TextEncoderConfig& t, int width, int layers, int heads, int mlp_dim, int hidden_state_index) {
  t.width = width;
  t.layers = layers;
  t.heads = heads;
  t.mlp_dim = mlp_dim;
  t.hidden_state_index = hidden_state_index;
}

// The tiny presets' UNet: 32 channels at multipliers 1, 2, 2; attention at `attention` with
// `depth` transformer blocks per level, over a context `context_dim` wide.
void resize_unet(UNetConfig& u, std::vector<int> attention, std::vector<int> depth, int context_dim) {
  u.model_channels = 32;
  u.channel_mult = {1, 2, 2};
  u.attention_resolutions = std::move(attention);
  u.transformer_depth = std::move(depth);
  u.context_dim = context_dim;
}

void resize_vae(VaeConfig& v, int ch, std::vector<int> ch_mult, int num_res_blocks) {
  v.ch = ch;
  v.ch_mult = std::move(ch_mult);
  v.num_res_blocks = num_res_blocks;
}

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::SD1: return "SD 1.x";
    case Arch::SD2: return "SD 2.x";
    case Arch::SDXL_BASE: return "SDXL base";
    case Arch::SDXL_REFINER: return "SDXL refiner";
    case Arch::SD3: return "SD 3";
    case Arch::FLUX_DEV: return "Flux.1 dev";
    case Arch::FLUX_SCHNELL: return "Flux.1 schnell";
    case Arch::FLUX_PART: return "Flux.1 component";
    case Arch::UNKNOWN: return "unknown";
  }
  return "unknown";
}

ModelConfig preset_sd15() {
  ModelConfig m;
  m.arch = Arch::SD1;
  m.text_encoders.push_back(clip_l("cond_stage_model.transformer.text_model."));
  return m;
}

ModelConfig preset_sdxl_base() {
  ModelConfig m;
  m.arch = Arch::SDXL_BASE;
  m.ddpm_buffers = false;
  m.ema_scalars = false;
  auto& u = m.unet;
  u.channel_mult = {1, 2, 4};
  u.attention_resolutions = {4, 2};
  u.num_heads = -1;
  u.num_head_channels = 64;
  u.transformer_depth = {0, 2, 10};
  u.transformer_depth_middle = 10;
  u.context_dim = 2048;
  u.use_linear_in_transformer = true;
  u.adm_in_channels = 2816;
  m.vae.scale_factor = 0.13025f;
  auto l = clip_l("conditioner.embedders.0.transformer.text_model.");
  l.hidden_state_index = 11;
  l.final_layer_norm = false;
  m.text_encoders.push_back(l);
  TextEncoderConfig g;
  g.name = "clip_g";
  g.prefix = "conditioner.embedders.1.model.";
  g.open_clip_layout = true;
  g.width = 1280;
  g.layers = 32;
  g.heads = 20;
  g.mlp_dim = 5120;
  g.quick_gelu = false;
  g.projection_dim = 1280;
  g.position_ids = false;
  g.logit_scale = true;
  g.hidden_state_index = 31;
  g.final_layer_norm = false;
  g.pad_id = 0;
  m.text_encoders.push_back(g);
  return m;
}

ModelConfig preset_tiny_sd1() {
  ModelConfig m = preset_sd15();
  m.ema_scalars = false;
  resize_unet(m.unet, {1, 2}, {1, 1, 1}, 64);
  m.unet.num_heads = 2;
  resize_vae(m.vae, 32, {1, 1, 2, 2}, 1);
  resize_text_encoder(m.text_encoders[0], 64, 3, 4, 256, 3);
  m.ldm_config_json = to_ldm_config_json(m);
  return m;
}

ModelConfig preset_tiny_sdxl() {
  ModelConfig m = preset_sdxl_base();
  resize_unet(m.unet, {2, 4}, {0, 1, 2}, 160);
  m.unet.num_head_channels = 16;
  m.unet.transformer_depth_middle = 2;
  m.unet.adm_in_channels = 1632;
  resize_vae(m.vae, 32, {1, 1, 2, 2}, 1);
  resize_text_encoder(m.text_encoders[0], 64, 3, 4, 256, 2);
  resize_text_encoder(m.text_encoders[1], 96, 3, 4, 384, 2);
  m.text_encoders[1].projection_dim = 96;
  m.ldm_config_json = to_ldm_config_json(m);
  return m;
}

std::optional<ModelConfig> preset_by_name(const std::string& name) {
  if (name == "sd15") return preset_sd15();
  if (name == "sdxl") return preset_sdxl_base();
  if (name == "tiny-sd1") return preset_tiny_sd1();
  if (name == "tiny-sdxl") return preset_tiny_sdxl();
  return std::nullopt;
}

}  // namespace fp8s
