#include "models/controlnet_keys.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"
#include "models/config_json.h"

namespace fp8s {
namespace {

bool is_index(const std::string& s) {
  return !s.empty() && s.size() < 6 && s.find_first_not_of("0123456789") == std::string::npos;
}

// A diffusers ResNet's part names as ldm's.
std::string resnet_part(const std::string& rest) {
  static const std::pair<const char*, const char*> parts[] = {
      {"norm1.", "in_layers.0."}, {"conv1.", "in_layers.2."},  {"time_emb_proj.", "emb_layers.1."},
      {"norm2.", "out_layers.0."}, {"conv2.", "out_layers.3."}, {"conv_shortcut.", "skip_connection."}};
  for (const auto& [d, l] : parts) {
    if (starts_with(rest, d)) return l + rest.substr(std::string(d).size());
  }
  return rest;
}

// `name` split at its first two dots after `head`: (index, rest) when name = head + index + "." + rest.
bool split_index(const std::string& name, const std::string& head, std::string& index, std::string& rest) {
  if (!starts_with(name, head)) return false;
  const auto dot = name.find('.', head.size());
  if (dot == std::string::npos) return false;
  index = name.substr(head.size(), dot - head.size());
  rest = name.substr(dot + 1);
  return is_index(index);
}

// One diffusers ControlNetModel name as cldm's (n1: input blocks per level, resnets + downsampler).
std::string cldm_name(const std::string& name, int n1) {
  static const std::pair<const char*, const char*> heads[] = {
      {"conv_in.", "input_blocks.0.0."},
      {"time_embedding.linear_1.", "time_embed.0."},
      {"time_embedding.linear_2.", "time_embed.2."},
      {"add_embedding.linear_1.", "label_emb.0.0."},
      {"add_embedding.linear_2.", "label_emb.0.2."},
      {"controlnet_mid_block.", "middle_block_out.0."},
      {"controlnet_cond_embedding.conv_in.", "input_hint_block.0."},
      {"controlnet_cond_embedding.conv_out.", "input_hint_block.14."},
      {"mid_block.attentions.0.", "middle_block.1."},
      {"mid_block.resnets.0.", "middle_block.0."},
      {"mid_block.resnets.1.", "middle_block.2."}};
  for (const auto& [d, l] : heads) {
    const std::string head = d;
    if (!starts_with(name, head)) continue;
    const std::string rest = name.substr(head.size());
    return l + (starts_with(head, "mid_block.resnets.") ? resnet_part(rest) : rest);
  }
  std::string index, rest, i, inner;
  if (split_index(name, "controlnet_down_blocks.", index, rest)) return "zero_convs." + index + ".0." + rest;
  if (split_index(name, "controlnet_cond_embedding.blocks.", index, rest)) {
    return "input_hint_block." + std::to_string(2 * std::stoi(index) + 2) + "." + rest;
  }
  if (split_index(name, "down_blocks.", index, rest)) {
    const int level = std::stoi(index);
    if (split_index(rest, "resnets.", i, inner)) {
      return "input_blocks." + std::to_string(1 + level * n1 + std::stoi(i)) + ".0." + resnet_part(inner);
    }
    if (split_index(rest, "attentions.", i, inner)) return "input_blocks." + std::to_string(1 + level * n1 + std::stoi(i)) + ".1." + inner;
    if (starts_with(rest, "downsamplers.0.conv.")) return "input_blocks." + std::to_string((level + 1) * n1) + ".0.op." + rest.substr(20);
  }
  return name;  // not a ControlNetModel name: refused at load by it
}

}  // namespace

std::optional<ControlNetContents> controlnet_contents(const SafetensorsFile& file) {
  ControlNetContents c;
  if (file.find("lora_controlnet")) {
    c.control_lora = true;
    return c;
  }
  if (file.find("controlnet_cond_embedding.conv_in.weight")) {
    c.diffusers = true;
  } else if (file.find("control_model.input_hint_block.0.weight")) {
    c.prefix = "control_model.";
  } else if (!file.find("input_hint_block.0.weight")) {
    return std::nullopt;
  }
  c.difference = file.find("difference") != nullptr;
  return c;
}

std::optional<std::vector<FolderTensor>> diffusers_controlnet_names(const std::map<std::string, TensorRecord>& tensors) {
  if (!tensors.count("controlnet_cond_embedding.conv_in.weight") || !tensors.count("conv_in.weight")) return std::nullopt;
  int per_level = 0;  // resnets per down block
  while (tensors.count("down_blocks.0.resnets." + std::to_string(per_level) + ".conv1.weight")) ++per_level;
  const int n1 = per_level + 1;
  std::vector<FolderTensor> out;
  for (const auto& [name, t] : tensors) {
    const std::string to = cldm_name(name, n1);
    out.push_back({to, t.shape, {{name, 0, -1}}});
  }
  return out;
}

SafetensorsFile controlnet_file(const std::string& path, const ControlNetContents& contents) {
  return contents.diffusers ? SafetensorsFile::renamed(path, diffusers_controlnet_names) : SafetensorsFile(path);
}

ControlNetConfig controlnet_config(const SafetensorsFile& f, const std::string& p) {
  ControlNetConfig c;
  auto shape = [&](const std::string& key) -> const std::vector<int64_t>& {
    const auto* r = f.find(p + key);
    if (!r) throw InputError(f.path() + ": not a ControlNet this version reads (no " + p + key + ")");
    return r->shape;
  };
  auto& u = c.unet;
  u.model_channels = static_cast<int>(shape("input_blocks.0.0.weight").at(0));
  u.in_channels = static_cast<int>(shape("input_blocks.0.0.weight").at(1));
  c.hint_channels = static_cast<int>(shape("input_hint_block.0.weight").at(1));
  c.hint_block_channels.clear();
  for (int k : {0, 4, 8, 12}) c.hint_block_channels.push_back(static_cast<int>(shape("input_hint_block." + std::to_string(k) + ".weight").at(0)));
  (void)shape("input_hint_block.14.weight");
  // the input blocks: res blocks (with or without a transformer) and downsamplers
  auto depth_at = [&](const std::string& attn) {
    int d = 0;
    while (f.find(p + attn + ".transformer_blocks." + std::to_string(d) + ".attn1.to_q.weight")) ++d;
    return d;
  };
  u.channel_mult.clear();
  u.transformer_depth.clear();
  u.attention_resolutions.clear();
  u.num_res_blocks = 0;
  int block = 1, ds = 1;
  while (true) {
    int res = 0, depth = 0, out = 0;
    while (const auto* r = f.find(p + "input_blocks." + std::to_string(block) + ".0.in_layers.2.weight")) {
      out = static_cast<int>(r->shape.at(0));
      depth = std::max(depth, depth_at("input_blocks." + std::to_string(block) + ".1"));
      if (f.find(p + "input_blocks." + std::to_string(block) + ".1.proj_in.weight")) {
        u.use_linear_in_transformer = f.find(p + "input_blocks." + std::to_string(block) + ".1.proj_in.weight")->shape.size() == 2;
      }
      ++res;
      ++block;
    }
    if (res == 0) break;
    if (u.channel_mult.empty()) u.num_res_blocks = res;
    if (res != u.num_res_blocks || out % u.model_channels != 0) {
      throw InputError(f.path() + ": the ControlNet's input blocks do not form levels of equal depth");
    }
    u.channel_mult.push_back(out / u.model_channels);
    u.transformer_depth.push_back(depth);
    if (depth > 0) u.attention_resolutions.push_back(ds);
    if (!f.find(p + "input_blocks." + std::to_string(block) + ".0.op.weight")) break;
    ++block;
    ds *= 2;
  }
  if (u.channel_mult.empty()) throw InputError(f.path() + ": a ControlNet without input blocks");
  u.transformer_depth_middle = depth_at("middle_block.1");
  (void)shape("middle_block.2.out_layers.3.weight");
  (void)shape("middle_block_out.0.weight");
  for (const auto& t : f.tensors()) {
    if (starts_with(t.name, p) && ends_with(t.name, ".attn2.to_k.weight") && t.shape.size() == 2) {
      u.context_dim = static_cast<int>(t.shape[1]);
      break;
    }
  }
  if (const auto* label = f.find(p + "label_emb.0.0.weight")) u.adm_in_channels = static_cast<int>(label->shape.at(1));
  // heads: what the shapes cannot say
  u.num_heads = c.sdxl() ? -1 : 8;
  u.num_head_channels = c.sdxl() ? 64 : -1;
  if (const auto it = f.metadata().find("controlnet.config"); it != f.metadata().end()) {
    try {
      const auto j = nlohmann::json::parse(it->second).at("unet");
      read_int_fields(j, f.path(), "controlnet.config unet", {{"num_heads", &u.num_heads}, {"num_head_channels", &u.num_head_channels}});
    } catch (const nlohmann::json::exception& e) {
      throw InputError(f.path() + ": controlnet.config is not valid JSON (" + e.what() + ")");
    }
    // -1 leaves the other rule in charge; 0 would divide by zero when the heads are formed
    if (u.num_head_channels != -1) check_config_value(u.num_head_channels, 1, 4096, f.path(), "controlnet.config num_head_channels");
    if (u.num_heads != -1) check_config_value(u.num_heads, 1, 1024, f.path(), "controlnet.config num_heads");
    if (u.num_heads == -1 && u.num_head_channels == -1) {
      throw InputError(f.path() + ": controlnet.config gives neither num_heads nor num_head_channels; use the file from its source");
    }
  }
  return c;
}

}  // namespace fp8s
