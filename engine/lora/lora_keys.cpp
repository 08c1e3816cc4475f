#include "lora/lora_keys.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/error.h"
#include "core/strings.h"
#include "models/tensor_roles.h"

namespace fp8s {
namespace {

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

int64_t trailing_product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (std::size_t i = 1; i < s.size(); ++i) {
    if (s[i] != 0 && n > INT64_MAX / s[i]) return -1;
    n *= s[i];
  }
  return n;
}

bool float_factor(Dtype d) { return d == Dtype::F16 || d == Dtype::F32 || d == Dtype::BF16 || d == Dtype::F64; }

}  // namespace

std::vector<LoraModuleLayout> lora_modules(const std::vector<TensorRecord>& tensors, const std::string& label) {
  struct Parts {
    const TensorRecord* down = nullptr;
    const TensorRecord* up = nullptr;
    const TensorRecord* alpha = nullptr;
  };
  std::map<std::string, Parts> parts;
  for (const auto& t : tensors) {
    const std::string& k = t.name;
    // a model's own weights: a checkpoint (or a diffusion model) given where a LoRA belongs
    for (const char* model_prefix : {"model.diffusion_model.", "first_stage_model.", "double_blocks.", "diffusion_model.double_blocks."}) {
      if (starts_with(k, model_prefix) && k.find("lora") == std::string::npos && ends_with(k, ".weight")) {
        throw InputError(label + ": is a model checkpoint (tensor '" + k + "'), not a LoRA; open it as the model (--model)");
      }
    }
    for (const char* kind : {".hada_w1_a", ".lokr_w1", ".lokr_w1_a", ".oft_blocks", ".b_norm", ".diff"}) {
      // LyCORIS's names end with their kind (".diff" inside "model.diffusion_model." is not one)
      if (ends_with(k, kind) || k.find(std::string(kind) + ".") != std::string::npos || k.find(std::string(kind) + "_") != std::string::npos) {
        const std::string name = std::strcmp(kind, ".hada_w1_a") == 0 ? "LoHa"
                                 : std::string(kind).rfind(".lokr", 0) == 0 ? "LoKr"
                                                                            : "this LyCORIS kind";
        throw InputError(label + ": " + name + " networks (tensor '" + k + "') are not supported yet; use a LoRA/LoCon file");
      }
    }
    if (ends_with(k, ".dora_scale")) {
      throw InputError(label + ": DoRA LoRAs (tensor '" + k + "') are not supported yet; use a plain LoRA/LoCon file");
    }
    // (PEFT's adapter name "default" in the middle, as some trainers save it)
    for (const char* suffix : {".lora_down.weight", ".lora_up.weight", ".alpha", ".lora_A.weight", ".lora_B.weight",
                               ".lora.down.weight", ".lora.up.weight", ".lora_A.default.weight", ".lora_B.default.weight"}) {
      if (!ends_with(k, suffix)) continue;
      const std::string stem = k.substr(0, k.size() - std::strlen(suffix));
      if (stem.empty()) break;
      auto& p = parts[kohya_name_of(stem)];
      const std::string s = suffix;
      const TensorRecord** slot = s == ".alpha" ? &p.alpha
                                  : (s == ".lora_down.weight" || s == ".lora_A.weight" || s == ".lora.down.weight" ||
                                     s == ".lora_A.default.weight")
                                      ? &p.down
                                      : &p.up;
      if (*slot) throw InputError(label + ": LoRA module '" + kohya_name_of(stem) + "' has two " + s.substr(1) + " tensors");
      *slot = &t;
      break;
    }
  }
  std::vector<LoraModuleLayout> out;
  for (const auto& [name, p] : parts) {
    if (!p.down || !p.up) {
      throw InputError(label + ": LoRA module '" + name + "' lacks its " + (p.down ? "up" : "down") + " matrix");
    }
    const auto& d = p.down->shape;
    const auto& u = p.up->shape;
    const bool dims_ok = (d.size() == 2 || d.size() == 4) && (u.size() == 2 || u.size() == 4);
    if (!dims_ok || !float_factor(p.down->dtype) || !float_factor(p.up->dtype)) {
      throw InputError(label + ": LoRA module '" + name + "' has factors " + dtype_name(p.down->dtype) + shape_text(d) +
                       " and " + dtype_name(p.up->dtype) + shape_text(u) + "; expected 2-D or 4-D float tensors");
    }
    if (d[0] < 1 || trailing_product(u) != d[0]) {
      throw InputError(label + ": LoRA module '" + name + "' has mismatched ranks (down " + shape_text(d) + ", up " +
                       shape_text(u) + ")");
    }
    if (p.alpha && (p.alpha->numel() != 1 || !float_factor(p.alpha->dtype))) {
      throw InputError(label + ": LoRA module '" + name + "' has an alpha that is not one number (" +
                       dtype_name(p.alpha->dtype) + shape_text(p.alpha->shape) + ")");
    }
    LoraModuleLayout m;
    m.name = name;
    m.down = *p.down;
    m.up = *p.up;
    if (p.alpha) m.alpha = *p.alpha;
    out.push_back(std::move(m));
  }
  if (out.empty()) throw InputError(label + ": holds no LoRA modules (lora_down/lora_up tensors)");
  return out;
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
  auto index = [](const std::string& s) {
    return !s.empty() && s.size() <= 6 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!index(parts[1])) return "";
  if (parts[0] == "middle_block") {
    const int m = std::stoi(parts[1]);
    const std::string rest = join_from(2);
    if (m == 1) return "mid_block.attentions.0." + rest;
    return "mid_block.resnets." + std::to_string(m == 0 ? 0 : 1) + "." + resnet_part(rest);
  }
  if (!index(parts[2])) return "";
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
  const std::string unet_prefix = kUNetPrefix;
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

LoraTargetRows lora_target_rows(const std::string& target, int64_t weight_rows) {
  LoraTargetRows r;
  const auto hash = target.find('#');
  r.key = target.substr(0, hash);
  r.count = weight_rows;
  if (hash == std::string::npos) return r;
  const std::string tag = target.substr(hash + 1);
  if (tag == "q" || tag == "k" || tag == "v") {
    r.count = weight_rows / 3;
    r.start = static_cast<int64_t>(std::string("qkv").find(tag)) * r.count;
  } else if (tag == "swap") {
    r.swap_halves = true;
  } else {
    const auto parts = split(tag, ':');
    if (parts.size() != 3 || parts[0] != "rows") throw std::invalid_argument("lora_target_rows: bad target " + target);
    r.start = std::stoll(parts[1]);
    r.count = std::stoll(parts[2]);
  }
  return r;
}

std::string lora_underscored(std::string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

std::string lora_rows_target(const std::string& key, int64_t start, int64_t count) {
  return key + "#rows:" + std::to_string(start) + ":" + std::to_string(count);
}

std::vector<int> lora_block_indices(const std::map<std::string, std::vector<int64_t>>& keys, const std::string& head,
                                    const std::string& tail) {
  std::vector<int> out;
  for (const auto& [k, shape] : keys) {
    if (!starts_with(k, head) || !ends_with(k, tail) || k.size() <= head.size() + tail.size()) continue;
    const std::string n = k.substr(head.size(), k.size() - head.size() - tail.size());
    if (!n.empty() && n.size() < 6 && n.find_first_not_of("0123456789") == std::string::npos) out.push_back(std::stoi(n));
  }
  return out;
}

void refuse_lora_for_model(const std::string& label, const std::map<std::string, std::string>& metadata, const std::string& model,
                           std::size_t hits, std::size_t modules) {
  const auto base = metadata.count("ss_base_model_version") ? metadata.at("ss_base_model_version") : std::string("unknown");
  throw InputError(label + ": this LoRA (base model " + base + ") does not fit the loaded " + model + " model: " +
                   std::to_string(hits) + " of " + std::to_string(modules) + " modules match its transformer; use a LoRA trained for " +
                   model);
}

LoraLayoutPlan match_lora_modules(const std::vector<LoraModuleLayout>& modules,
                                  const std::map<std::string, std::string>& map) {
  LoraLayoutPlan plan;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    auto it = map.find(modules[i].name);
    if (it == map.end()) {
      plan.unmatched.push_back(modules[i].name);
    } else {
      plan.targets.push_back({i, it->second});
    }
  }
  return plan;
}

void check_lora_shapes(const LoraLayoutPlan& plan, const std::vector<LoraModuleLayout>& modules,
                       const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& label) {
  // ΔW = up.flatten(1) @ down.flatten(1) must have the target's rows and the weight's fan-in.
  for (const auto& [i, target] : plan.targets) {
    const auto& m = modules[i];
    const auto hash = target.find('#');
    auto w = shapes.at(target.substr(0, hash));
    if (w.size() == 4 && w[2] < 0 && w[3] < 0 && !m.up.shape.empty()) {
      // a padded comfy_quant layer ({rows, columns, -row pad, -column pad}, lora_linear_weights):
      // the LoRA's sizes pad up to the stored ones (a fused layer's rows cannot be told apart there)
      const auto pad = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
      const int64_t k = trailing_product(m.down.shape);
      if (lora_target_rows(target, w[0]).count == w[0] && pad(m.up.shape[0], -w[2]) == w[0] && pad(k, -w[3]) == w[1]) continue;
      w.resize(2);
    }
    const auto rows = lora_target_rows(target, w[0]);
    const bool sliced = rows.count != w[0];
    w[0] = rows.count;
    if (m.up.shape[0] != w[0] || trailing_product(m.down.shape) != trailing_product(w)) {
      throw InputError(label + ": LoRA module '" + m.name + "' (down " + shape_text(m.down.shape) + ", up " +
                       shape_text(m.up.shape) + ") does not fit the layer's weight " + shape_text(w) +
                       (sliced ? " (its rows of a fused layer)" : "") + ": the LoRA was made for a different model");
    }
  }
}

LoraLayoutPlan plan_lora_layout(const std::vector<LoraModuleLayout>& modules,
                                const std::map<std::string, std::string>& metadata,
                                const ModelConfig& config, const std::string& label) {
  const auto map = lora_key_map(config);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& e : checkpoint_layout(config, Dtype::F16)) shapes[e.name] = e.shape;
  LoraLayoutPlan plan = match_lora_modules(modules, map);
  bool sdxl_names = false, sd1_names = false;
  for (const auto& m : modules) {
    if (starts_with(m.name, "lora_te1_") || starts_with(m.name, "lora_te2_")) sdxl_names = true;
    if (starts_with(m.name, "lora_te_")) sd1_names = true;
  }
  const bool model_sdxl = config.text_encoders.size() > 1;
  if ((sdxl_names && !model_sdxl) || (sd1_names && model_sdxl) || plan.targets.empty()) {
    const auto base = metadata.count("ss_base_model_version") ? metadata.at("ss_base_model_version") : std::string("unknown");
    throw InputError(label + ": this LoRA (base model " + base + ") does not fit the loaded " +
                     (model_sdxl ? "SDXL" : "SD 1.x") + " model: " + std::to_string(plan.targets.size()) +
                     " of " + std::to_string(modules.size()) + " modules match");
  }
  check_lora_shapes(plan, modules, shapes, label);
  return plan;
}

}  // namespace fp8s
