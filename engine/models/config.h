// Model configurations: the UNet, VAE and text-encoder hyper-parameters of a checkpoint, from its
// `ldm.config` metadata (ldm_config.cpp) or a preset for a released architecture (presets.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fp8s {

// FLUX_PART: a Flux component file on its own (T5-XXL, CLIP-L, the autoencoder).
enum class Arch { SD1, SD2, SDXL_BASE, SDXL_REFINER, SD3, FLUX_DEV, FLUX_SCHNELL, FLUX_PART, UNKNOWN };
const char* arch_name(Arch arch);  // "SD 1.x", "SDXL base", ...

struct UNetConfig {
  int in_channels = 4;
  int out_channels = 4;
  int model_channels = 320;
  std::vector<int> channel_mult{1, 2, 4, 4};
  int num_res_blocks = 2;
  std::vector<int> attention_resolutions{4, 2, 1};
  int num_heads = 8;
  int num_head_channels = -1;
  std::vector<int> transformer_depth{1, 1, 1, 1};  // per level
  int transformer_depth_middle = 1;
  int context_dim = 768;
  bool use_linear_in_transformer = false;
  int adm_in_channels = 0;  // 0: no label_emb
};

struct VaeConfig {
  int ch = 128;
  std::vector<int> ch_mult{1, 2, 4, 4};
  int num_res_blocks = 2;
  int z_channels = 4;
  int embed_dim = 4;
  int in_channels = 3;
  int out_ch = 3;
  bool double_z = true;
  float scale_factor = 0.18215f;
  float shift_factor = 0;   // Flux's autoencoder: latent = scale · (z − shift)
  bool quant_convs = true;  // quant_conv / post_quant_conv (Flux's autoencoder has none)
  // FLUX.2's autoencoder names them encoder.quant_conv and decoder.post_quant_conv (SD's: at the top)
  bool quant_convs_in_coders = false;
};

struct TextEncoderConfig {
  std::string name;    // "clip_l", "clip_g", "clip_h"
  std::string prefix;  // where the encoder's own names start
  bool open_clip_layout = false;  // false: Hugging Face CLIPTextModel names
  int width = 768;
  int layers = 12;
  int heads = 12;
  int mlp_dim = 3072;
  int vocab_size = 49408;
  int context_length = 77;
  bool quick_gelu = true;
  int projection_dim = 0;     // open_clip text_projection width (0: none)
  bool position_ids = true;   // HF layout: the persistent `embeddings.position_ids` buffer
  bool logit_scale = false;   // open_clip layout: the 0-d `logit_scale`
  int hidden_state_index = 0; // layer whose output is used (0 = last)
  bool final_layer_norm = true;
  int pad_id = 49407;
};

struct ModelConfig {
  Arch arch = Arch::SD1;
  std::string parameterization = "eps";
  UNetConfig unet;
  VaeConfig vae;
  std::vector<TextEncoderConfig> text_encoders;
  bool ddpm_buffers = true;  // the 12 ldm DDPM schedule buffers at top level
  bool ema_scalars = true;   // model_ema.decay / model_ema.num_updates
  std::string ldm_config_json;  // the `ldm.config` text this came from, if any
};

// Resizing helpers for the small configurations (the tiny presets, the demo model).
void resize_text_encoder(TextEncoderConfig& t, int width, int layers, int heads, int mlp_dim, int hidden_state_index);
void resize_vae(VaeConfig& v, int ch, std::vector<int> ch_mult, int num_res_blocks);

// Presets: the released SD 1.5 and SDXL base 1.0 files, and the tiny reference configurations.
ModelConfig preset_sd15();
ModelConfig preset_sdxl_base();
ModelConfig preset_tiny_sd1();
ModelConfig preset_tiny_sdxl();
// Looks a preset up by its make-synthetic name: sd15, sdxl, tiny-sd1, tiny-sdxl.
std::optional<ModelConfig> preset_by_name(const std::string& name);

// Every field of a configuration in its range (heads dividing widths, a usable latent scale), so
// that nothing built from it divides by zero, indexes past a list or allocates without bound;
// InputError naming `label` and the field otherwise. parse_ldm_config calls it.
void validate_config(const ModelConfig& config, const std::string& label);
// Parses the `ldm.config` metadata JSON; throws InputError naming `label` when it is malformed.
ModelConfig parse_ldm_config(const std::string& json_text, const std::string& label);
std::string to_ldm_config_json(const ModelConfig& config);

}  // namespace fp8s
