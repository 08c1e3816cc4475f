#include "lora/lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/logging.h"
#include "io/safetensors.h"
#include "models/nn.h"

namespace fp8s {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

std::string underscored(std::string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

std::string resnet_part(const std::string& rest) {
  static const std::pair<const char*, const char*> parts[] = {
      {"in_layers.0", "norm1"},       {"in_layers.2", "conv1"},   {"emb_layers.1", "time_emb_proj"},
      {"out_layers.0", "norm2"},      {"out_layers.3", "conv2"},  {"skip_connection", "conv_shortcut"}};
  for (const auto& [ldm, diff] : parts) {
    if (rest == ldm) return diff;
  }
  return rest;
}

}  // namespace

at::Tensor LoraModule::delta(double multiplier, at::IntArrayRef shape) const {
  const double scale = multiplier * alpha / static_cast<double>(rank());
  return at::matmul(up.flatten(1), down.flatten(1)).reshape(shape) * scale;
}

LoraFile read_lora(const std::string& path) {
  SafetensorsFile file(path);
  LoraFile lora;
  lora.path = path;
  lora.metadata = file.metadata();
  std::map<std::string, LoraModule> modules;
  for (const auto& t : file.tensors()) {
    const std::string& k = t.name;
    for (const char* kind : {".hada_w1_a", ".lokr_w1", ".lokr_w1_a", ".oft_blocks", ".b_norm", ".diff"}) {
      if (k.find(kind) != std::string::npos) {
        const std::string name = std::string(kind) == ".hada_w1_a" ? "LoHa" : (std::string(kind).rfind(".lokr", 0) == 0 ? "LoKr" : "this LyCORIS kind");
        throw InputError(path + ": " + name + " networks (tensor '" + k + "') are not supported yet; use a LoRA/LoCon file");
      }
    }
    if (ends_with(k, ".dora_scale")) {
      throw InputError(path + ": DoRA LoRAs (tensor '" + k + "') are not supported yet; use a plain LoRA/LoCon file");
    }
    std::string stem, part;
    for (const char* suffix : {".lora_down.weight", ".lora_up.weight", ".alpha", ".lora_A.weight",
                               ".lora_B.weight", ".lora.down.weight", ".lora.up.weight"}) {
      if (ends_with(k, suffix)) {
        stem = k.substr(0, k.size() - std::string(suffix).size());
        part = suffix;
        break;
      }
    }
    if (stem.empty()) continue;
    auto& m = modules[kohya_name_of(stem)];
    m.name = kohya_name_of(stem);
    auto value = read_tensor(file, t);
    if (part == ".alpha") {
      m.alpha = value.to(at::kDouble).item<double>();
    } else if (part == ".lora_down.weight" || part == ".lora_A.weight" || part == ".lora.down.weight") {
      m.down = value;
    } else {
      m.up = value;
    }
  }
  for (auto& [name, m] : modules) {
    if (!m.down.defined() || !m.up.defined()) {
      throw InputError(path + ": LoRA module '" + name + "' lacks its " + (m.down.defined() ? "up" : "down") + " matrix");
    }
    if (m.up.size(1) != m.down.size(0) || m.down.dim() < 2 || m.up.dim() < 2) {
      throw InputError(path + ": LoRA module '" + name + "' has mismatched ranks");
    }
    if (m.alpha == 0) m.alpha = static_cast<double>(m.rank());
    lora.modules.push_back(std::move(m));
  }
  if (lora.modules.empty()) throw InputError(path + ": holds no LoRA modules (lora_down/lora_up tensors)");
  return lora;
}

std::string kohya_name_of(const std::string& stem) {
  // diffusers/PEFT: unet.down_blocks.0...; text_encoder.text_model...; text_encoder_2....
  if (starts_with(stem, "unet.")) return "lora_unet_" + underscored(stem.substr(5));
  if (starts_with(stem, "text_encoder_2.")) return "lora_te2_" + underscored(stem.substr(15));
  if (starts_with(stem, "text_encoder.")) return "lora_te_" + underscored(stem.substr(13));
  return stem;
}

std::string ldm_to_diffusers_unet(const std::string& ldm, const UNetConfig& c) {
  const int per_level = c.num_res_blocks + 1;
  if (ldm == "input_blocks.0.0") return "conv_in";
  if (ldm == "time_embed.0") return "time_embedding.linear_1";
  if (ldm == "time_embed.2") return "time_embedding.linear_2";
  if (ldm == "label_emb.0.0") return "add_embedding.linear_1";
  if (ldm == "label_emb.0.2") return "add_embedding.linear_2";
  if (ldm == "out.0") return "conv_norm_out";
  if (ldm == "out.2") return "conv_out";
  const auto parts = split(ldm, '.');
  if (parts.size() < 3) return "";
  auto join_from = [&](std::size_t first) {
    std::string r;
    for (std::size_t i = first; i < parts.size(); ++i) r += (r.empty() ? "" : ".") + parts[i];
    return r;
  };
  if (parts[0] == "middle_block") {
    const int m = std::stoi(parts[1]);
    const std::string rest = join_from(2);
    if (m == 1) return "mid_block.attentions.0." + rest;
    return "mid_block.resnets." + std::to_string(m == 0 ? 0 : 1) + "." + resnet_part(rest);
  }
  const int n = std::stoi(parts[1]);
  const int m = std::stoi(parts[2]);
  const std::string rest = join_from(3);
  if (parts[0] == "input_blocks") {
    const int level = (n - 1) / per_level, i = (n - 1) % per_level;
    if (i == c.num_res_blocks) return "down_blocks." + std::to_string(level) + ".downsamplers.0.conv";
    return "down_blocks." + std::to_string(level) + (m == 0 ? ".resnets." : ".attentions.") +
           std::to_string(i) + "." + (m == 0 ? resnet_part(rest) : rest);
  }
  if (parts[0] == "output_blocks") {
    const int j = n / per_level, i = n % per_level;
    if (m == 0) return "up_blocks." + std::to_string(j) + ".resnets." + std::to_string(i) + "." + resnet_part(rest);
    if (rest == "conv") return "up_blocks." + std::to_string(j) + ".upsamplers.0.conv";
    return "up_blocks." + std::to_string(j) + ".attentions." + std::to_string(i) + "." + rest;
  }
  return "";
}

std::map<std::string, std::string> lora_key_map(const ModelConfig& config) {
  std::map<std::string, std::string> map;
  const std::string unet_prefix = "model.diffusion_model.";
  const bool sdxl = config.text_encoders.size() > 1;
  for (const auto& e : checkpoint_layout(config, Dtype::F16)) {
    if (!is_weight_role(e.role) && !(e.role == TensorRole::Embedding && starts_with(e.name, unet_prefix))) continue;
    if (e.component == Component::UNet) {
      const std::string module = e.name.substr(unet_prefix.size(), e.name.size() - unet_prefix.size() - 7);
      const auto diffusers = ldm_to_diffusers_unet(module, config.unet);
      if (!diffusers.empty()) map["lora_unet_" + underscored(diffusers)] = e.name;
      // SDXL kohya LoRAs name UNet modules by their sgm/ldm path instead
      map["lora_unet_" + underscored(module)] = e.name;
      continue;
    }
    if (e.component != Component::TextEncoder) continue;
    for (std::size_t k = 0; k < config.text_encoders.size(); ++k) {
      const auto& te = config.text_encoders[k];
      if (!starts_with(e.name, te.prefix)) continue;
      const std::string tag = sdxl ? "lora_te" + std::to_string(k + 1) + "_" : "lora_te_";
      if (!te.open_clip_layout) {
        // HF names: text_model.encoder.layers.N.self_attn.q_proj
        std::string module = "text_model." + e.name.substr(te.prefix.size(), e.name.size() - te.prefix.size() - 7);
        map[tag + underscored(module)] = e.name;
      } else {
        // open_clip: kohya uses the HF names of the same layers
        const std::string rest = e.name.substr(te.prefix.size());
        const auto parts = split(rest, '.');
        if (parts.size() >= 5 && parts[0] == "transformer" && parts[1] == "resblocks") {
          const std::string layer = "text_model_encoder_layers_" + parts[2] + "_";
          if (parts[3] == "mlp" && parts[4] == "c_fc") map[tag + layer + "mlp_fc1"] = e.name;
          if (parts[3] == "mlp" && parts[4] == "c_proj") map[tag + layer + "mlp_fc2"] = e.name;
          if (parts[3] == "attn" && parts[4] == "out_proj") map[tag + layer + "self_attn_out_proj"] = e.name;
          if (parts[3] == "attn" && parts[4] == "in_proj_weight") {
            // q/k/v LoRAs land on thirds of the fused projection: key suffix #q, #k, #v
            for (const char* p : {"q", "k", "v"}) map[tag + layer + "self_attn_" + p + "_proj"] = e.name + "#" + p;
          }
        }
      }
    }
  }
  return map;
}

LoraPlan plan_lora(const LoraFile& lora, const ModelConfig& config) {
  const auto map = lora_key_map(config);
  LoraPlan plan;
  bool sdxl_names = false, sd1_names = false;
  for (const auto& m : lora.modules) {
    if (starts_with(m.name, "lora_te1_") || starts_with(m.name, "lora_te2_")) sdxl_names = true;
    if (starts_with(m.name, "lora_te_")) sd1_names = true;
    auto it = map.find(m.name);
    if (it == map.end()) {
      plan.unmatched.push_back(m.name);
    } else {
      plan.targets.push_back({&m, it->second});
    }
  }
  const bool model_sdxl = config.text_encoders.size() > 1;
  if ((sdxl_names && !model_sdxl) || (sd1_names && model_sdxl) || plan.targets.empty()) {
    const auto base = lora.metadata.count("ss_base_model_version") ? lora.metadata.at("ss_base_model_version") : std::string("unknown");
    throw InputError(lora.path + ": this LoRA (base model " + base + ") does not fit the loaded " +
                     (model_sdxl ? "SDXL" : "SD 1.x") + " model: " + std::to_string(plan.targets.size()) +
                     " of " + std::to_string(lora.modules.size()) + " modules match");
  }
  if (!plan.unmatched.empty()) {
    std::string first;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, plan.unmatched.size()); ++i) first += (i ? ", " : "") + plan.unmatched[i];
    log().warn("{}: {} of {} LoRA modules match no layer and are ignored (first: {})", lora.path,
               plan.unmatched.size(), lora.modules.size(), first);
  }
  return plan;
}

void make_synthetic_lora(const ModelConfig& config, int rank, double alpha, double strength,
                         uint64_t seed, const std::string& out, bool overwrite) {
  if (rank < 1 || rank > 1024) throw InputError("--rank must be between 1 and 1024");
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& e : checkpoint_layout(config, Dtype::F16)) shapes[e.name] = e.shape;
  std::vector<TensorSpec> specs;
  std::vector<std::pair<std::string, std::vector<int64_t>>> modules;
  for (const auto& [name, key] : lora_key_map(config)) {
    if (key.find('#') != std::string::npos || name.find("time_embedding") != std::string::npos ||
        name.find("add_embedding") != std::string::npos) {
      continue;
    }
    const auto& w = shapes.at(key);
    std::vector<int64_t> down{rank, w[1]}, up{w[0], rank};
    if (w.size() == 4) {
      down = {rank, w[1], w[2], w[3]};
      up = {w[0], rank, 1, 1};
    }
    specs.push_back({name + ".alpha", Dtype::F16, {}});
    specs.push_back({name + ".lora_down.weight", Dtype::F16, down});
    specs.push_back({name + ".lora_up.weight", Dtype::F16, up});
    modules.push_back({name, w});
  }
  const bool sdxl = config.text_encoders.size() > 1;
  std::map<std::string, std::string> meta{{"ss_network_dim", std::to_string(rank)},
                                          {"ss_network_alpha", std::to_string(alpha)},
                                          {"ss_network_module", "networks.lora"},
                                          {"ss_base_model_version", sdxl ? "sdxl_base_v1-0" : "sd_v1"},
                                          {"ss_tag_frequency", "{\"synthetic\": {\"fp8studio\": 1}}"}};
  SafetensorsWriter writer(out, specs, meta, overwrite);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto write_half = [&](const at::Tensor& t) {
    auto h = t.to(at::kHalf).contiguous();
    writer.append(h.data_ptr(), static_cast<std::size_t>(h.numel()) * 2);
  };
  for (const auto& [name, w] : modules) {
    int64_t fan_in = 1;
    for (std::size_t i = 1; i < w.size(); ++i) fan_in *= w[i];
    write_half(at::full({}, alpha, at::kFloat));
    // var(down) = 1/fan_in; var(ΔW) = rank · var(up) · var(down) · (alpha/rank)² = strength²/fan_in
    const double down_bound = std::sqrt(3.0 / fan_in);
    const double up_std = strength * rank / alpha / std::sqrt(static_cast<double>(rank));
    std::vector<int64_t> down_shape{rank, w[1]}, up_shape{w[0], rank};
    if (w.size() == 4) down_shape = {rank, w[1], w[2], w[3]}, up_shape = {w[0], rank, 1, 1};
    write_half((at::rand(down_shape, gen) * 2 - 1) * down_bound);
    write_half((at::rand(up_shape, gen) * 2 - 1) * (up_std * std::sqrt(3.0)));
  }
  writer.commit();
}

}  // namespace fp8s
