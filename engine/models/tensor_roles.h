// What a checkpoint tensor is, from its name and shape alone: its component (by the ldm/sgm
// prefixes), its role, and whether FP8 storage applies to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8s {

// The ldm/sgm state-dict prefixes of the UNet and the VAE (text encoders: TextEncoderConfig::prefix).
inline constexpr const char* kUNetPrefix = "model.diffusion_model.";
inline constexpr const char* kVaePrefix = "first_stage_model.";

// What a tensor is, which decides how it is stored and initialised.
enum class TensorRole {
  LinearWeight,  // quantisable when its component is
  ConvWeight,    // quantisable when its component is
  Bias,
  NormWeight,
  NormBias,
  Embedding,     // token/position/time/label embeddings and open_clip's text_projection
  Buffer,        // position ids, DDPM schedule, EMA scalars (not counted as parameters)
  Fp8Scale,      // a quantised weight's scale in any spelling, input scales and quantisation markers (fp8_files.h)
  Other          // e.g. open_clip's 0-d logit_scale
};

enum class Component { UNet, TextEncoder, Vae, Other };

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

}  // namespace fp8s
