// What a tensor of any checkpoint is, from its name and shape.
#include "models/tensor_roles.h"

#include "core/strings.h"
#include "models/fp8_files.h"

namespace fp8s {

Component component_of(const std::string& name) {
  if (starts_with(name, kUNetPrefix)) return Component::UNet;
  if (starts_with(name, kVaePrefix)) return Component::Vae;
  if (starts_with(name, "cond_stage_model.") || starts_with(name, "conditioner.embedders.")) {
    return Component::TextEncoder;
  }
  return Component::Other;
}

TensorRole role_of(const std::string& name, const std::vector<int64_t>& shape) {
  if (is_scale_name(name) || is_quantisation_marker(name)) return TensorRole::Fp8Scale;
  if (ends_with(name, "logit_scale")) return TensorRole::Other;
  if (ends_with(name, "position_ids") || starts_with(name, "model_ema.") || name.find('.') == std::string::npos) {
    return TensorRole::Buffer;
  }
  const auto last_dot = name.find_last_of('.');
  const std::string module = name.substr(0, last_dot);
  const auto module_dot = module.find_last_of('.');
  const std::string leaf = module_dot == std::string::npos ? module : module.substr(module_dot + 1);
  const bool is_norm = leaf.find("norm") != std::string::npos || starts_with(leaf, "ln_") ||
                       ends_with(module, "in_layers.0") || ends_with(module, "out_layers.0") ||
                       module == "model.diffusion_model.out.0";
  if (ends_with(name, "bias")) return is_norm ? TensorRole::NormBias : TensorRole::Bias;
  if (name.find("embedding") != std::string::npos || name.find(".time_embed.") != std::string::npos ||
      name.find(".label_emb.") != std::string::npos || ends_with(name, "text_projection")) {
    return TensorRole::Embedding;
  }
  if (ends_with(name, "weight")) {
    if (is_norm || shape.size() == 1) return TensorRole::NormWeight;
    if (shape.size() == 2) return TensorRole::LinearWeight;
    if (shape.size() == 4) return TensorRole::ConvWeight;
  }
  return TensorRole::Other;
}

bool is_weight_role(TensorRole role) {
  return role == TensorRole::LinearWeight || role == TensorRole::ConvWeight;
}

bool is_quantisable(const std::string& name, const std::vector<int64_t>& shape, bool fp8_vae) {
  const Component c = component_of(name);
  const bool component_ok =
      c == Component::UNet || c == Component::TextEncoder || (fp8_vae && c == Component::Vae);
  return component_ok && is_weight_role(role_of(name, shape));
}

std::string scale_key_for(const std::string& weight_name) {
  if (ends_with(weight_name, ".weight")) {
    return weight_name.substr(0, weight_name.size() - 6) + "scale_weight";
  }
  if (ends_with(weight_name, "_weight")) {
    return weight_name.substr(0, weight_name.size() - 6) + "scale_weight";
  }
  return weight_name + ".scale_weight";
}

}  // namespace fp8s
