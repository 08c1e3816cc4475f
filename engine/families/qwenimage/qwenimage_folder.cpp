#include "families/qwenimage/qwenimage_folder.h"

#include <regex>

#include "core/strings.h"

namespace fp8s {
namespace {

// Every tensor under its new name (`rename`: "" keeps the name).
template <class Rename>
std::vector<FolderTensor> renamed(const std::map<std::string, TensorRecord>& tensors, Rename rename) {
  std::vector<FolderTensor> out;
  for (const auto& [name, t] : tensors) {
    const std::string n = rename(name);
    out.push_back({n.empty() ? name : n, t.shape, {{name, 0, -1}}});
  }
  return out;
}

// A residual block's parts: diffusers' norm1/conv1/norm2/conv2/conv_shortcut, Wan's
// residual.0/2/3/6 and shortcut.
std::string residual_part(const std::string& part) {
  static const std::pair<const char*, const char*> parts[] = {{"norm1.", "residual.0."}, {"conv1.", "residual.2."},
                                                              {"norm2.", "residual.3."}, {"conv2.", "residual.6."},
                                                              {"conv_shortcut.", "shortcut."}};
  for (const auto& [from, to] : parts) {
    if (starts_with(part, from)) return to + part.substr(std::string(from).size());
  }
  return {};
}

}  // namespace

std::optional<std::vector<FolderTensor>> qwen25vl_transformers_names(const std::map<std::string, TensorRecord>& tensors) {
  // Qwen2.5-VL's language model has q/k/v biases (Mistral's and Qwen3's have none)
  if (!tensors.count("model.language_model.embed_tokens.weight") || !tensors.count("model.language_model.layers.0.self_attn.q_proj.bias")) {
    return std::nullopt;
  }
  return renamed(tensors, [](const std::string& n) -> std::string {
    if (starts_with(n, "model.language_model.")) return "model." + n.substr(21);
    if (starts_with(n, "model.visual.")) return n.substr(6);
    return {};
  });
}

std::string qwenimage_vae_released_name(const std::string& n) {
  static const std::pair<const char*, const char*> fixed[] = {
      {"quant_conv.", "conv1."},           {"post_quant_conv.", "conv2."},     {"encoder.conv_in.", "encoder.conv1."},
      {"decoder.conv_in.", "decoder.conv1."}, {"encoder.norm_out.", "encoder.head.0."}, {"decoder.norm_out.", "decoder.head.0."},
      {"encoder.conv_out.", "encoder.head.2."}, {"decoder.conv_out.", "decoder.head.2."},
      {"encoder.mid_block.attentions.0.", "encoder.middle.1."}, {"decoder.mid_block.attentions.0.", "decoder.middle.1."}};
  for (const auto& [from, to] : fixed) {
    if (starts_with(n, from)) return to + n.substr(std::string(from).size());
  }
  std::smatch m;
  static const std::regex mid(R"(^(encoder|decoder)\.mid_block\.resnets\.(\d+)\.(.*)$)");
  static const std::regex down(R"(^encoder\.down_blocks\.(\d+)\.(.*)$)");
  static const std::regex up_resnet(R"(^decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)$)");
  static const std::regex up_sampler(R"(^decoder\.up_blocks\.(\d+)\.upsamplers\.0\.(.*)$)");
  auto residual = [](const std::string& head, const std::string& part) {
    const std::string p = residual_part(part);
    return p.empty() ? std::string() : head + p;
  };
  if (std::regex_match(n, m, mid)) return residual(m[1].str() + ".middle." + std::to_string(2 * std::stoi(m[2].str())) + ".", m[3].str());
  if (std::regex_match(n, m, down)) {  // the encoder's flat index is kept; a resample/time_conv keeps its name
    const std::string head = "encoder.downsamples." + m[1].str() + ".", part = m[2].str();
    const std::string p = residual_part(part);
    return head + (p.empty() ? part : p);
  }
  // the decoder's levels: 3 residual blocks then the upsampler, 4 indices a level (the released
  // layout's num_res_blocks 2, which the converter assumes too)
  if (std::regex_match(n, m, up_resnet)) {
    return residual("decoder.upsamples." + std::to_string(4 * std::stoi(m[1].str()) + std::stoi(m[2].str())) + ".", m[3].str());
  }
  if (std::regex_match(n, m, up_sampler)) return "decoder.upsamples." + std::to_string(4 * std::stoi(m[1].str()) + 3) + "." + m[2].str();
  return {};
}

std::optional<std::vector<FolderTensor>> qwenimage_vae_diffusers_names(const std::map<std::string, TensorRecord>& tensors) {
  if (!tensors.count("decoder.mid_block.resnets.0.norm1.gamma") || !tensors.count("post_quant_conv.weight")) return std::nullopt;
  return renamed(tensors, qwenimage_vae_released_name);
}

}  // namespace fp8s
