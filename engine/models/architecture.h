// Model architectures: configurations (from `ldm.config` metadata or presets), the exact checkpoint
// key layout each configuration implies, architecture detection from keys, and tensor roles.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace fp8s {

enum class Arch { SD1, SD2, SDXL_BASE, SDXL_REFINER, SD3, UNKNOWN };
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

// Presets: the released SD 1.5 and SDXL base 1.0 files, and the tiny reference configurations.
ModelConfig preset_sd15();
ModelConfig preset_sdxl_base();
ModelConfig preset_tiny_sd1();
ModelConfig preset_tiny_sdxl();
// Looks a preset up by its make-synthetic name: sd15, sdxl, tiny-sd1, tiny-sdxl.
std::optional<ModelConfig> preset_by_name(const std::string& name);

// Parses the `ldm.config` metadata JSON; throws InputError naming `label` when it is malformed.
ModelConfig parse_ldm_config(const std::string& json_text, const std::string& label);
std::string to_ldm_config_json(const ModelConfig& config);

// What a tensor is, which decides how it is stored and initialised.
enum class TensorRole {
  LinearWeight,  // quantisable when its component is
  ConvWeight,    // quantisable when its component is
  Bias,
  NormWeight,
  NormBias,
  Embedding,     // token/position/time/label embeddings and open_clip's text_projection
  Buffer,        // position ids, DDPM schedule, EMA scalars (not counted as parameters)
  Fp8Scale,      // `<module>.scale_weight` of a quantised weight
  Other          // e.g. open_clip's 0-d logit_scale
};

enum class Component { UNet, TextEncoder, Vae, Other };
const char* component_name(Component component);

struct LayoutEntry {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::Other;
  Component component = Component::Other;
  Dtype dtype = Dtype::F32;  // for float tensors: the checkpoint's float type is applied by callers
  bool is_integer() const { return dtype == Dtype::I64 || dtype == Dtype::I32; }
};

// Every tensor of a single-file checkpoint for `config`, sorted by name. Float tensors carry
// `float_dtype`; DDPM buffers and EMA decay stay F32; position ids I64; EMA num_updates I32.
std::vector<LayoutEntry> checkpoint_layout(const ModelConfig& config, Dtype float_dtype);

// Classifies a tensor of any checkpoint by its name and shape (used for files whose layout we
// did not generate): component by prefix, role by name.
Component component_of(const std::string& name);
TensorRole role_of(const std::string& name, const std::vector<int64_t>& shape);
bool is_weight_role(TensorRole role);  // LinearWeight or ConvWeight
// Whether convert/engine store this tensor in FP8: Linear/Conv2d weights of the UNet and the text
// encoders, and of the VAE only when `fp8_vae`.
bool is_quantisable(const std::string& name, const std::vector<int64_t>& shape, bool fp8_vae);
// `<module>.weight` -> `<module>.scale_weight`; `attn.in_proj_weight` -> `attn.in_proj_scale_weight`.
std::string scale_key_for(const std::string& weight_name);

// Architecture detection from the keys (the decision order of reference/keys/README.md).
struct Detection {
  Arch arch = Arch::UNKNOWN;
  std::string variant;  // "", "inpainting", "instruct-pix2pix", "SSD-1B", ...
  std::string description() const;
};
using ShapeMap = std::map<std::string, std::vector<int64_t>>;
Detection detect_architecture(const ShapeMap& shapes);
Detection detect_architecture(const SafetensorsFile& file);

// The configuration of an opened checkpoint: `ldm.config` metadata if present, else the preset
// for the detected architecture. Throws InputError for architectures without one.
ModelConfig config_for(const SafetensorsFile& file);

}  // namespace fp8s
