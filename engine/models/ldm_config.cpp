// The `ldm.config` metadata JSON: parse (with errors naming the file) and write.
#include "models/config.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "core/error.h"
#include "models/config_json.h"

namespace fp8s {
namespace {

// A whole number that fits an int (config_int: nlohmann's get<int>() casts without a check).
int whole(const nlohmann::json& j, const std::string& what, const std::string& label) {
  return config_int(j, label, "ldm.config '" + what + "'");
}

// The field `key` of `j` as a whole number, or `fallback` where it is absent or null.
int whole_or(const nlohmann::json& j, const char* key, int fallback, const std::string& label) {
  return j.contains(key) && !j[key].is_null() ? whole(j[key], key, label) : fallback;
}

std::vector<int> int_list(const nlohmann::json& j, const std::string& what, const std::string& label) {
  std::vector<int> v;
  if (j.is_number()) return {whole(j, what, label)};
  if (!j.is_array()) throw InputError(label + ": ldm.config '" + what + "' is not a list");
  for (const auto& e : j) {
    if (!e.is_number_integer()) throw InputError(label + ": ldm.config '" + what + "' holds a non-integer");
    v.push_back(whole(e, what, label));
  }
  return v;
}

// A field's value in its range, or an InputError naming the file, the field and the range.
void check_range(long long value, long long lo, long long hi, const std::string& what, const std::string& label) {
  if (value < lo || value > hi) {
    throw InputError(label + ": ldm.config " + what + " is " + std::to_string(value) + ", outside " + std::to_string(lo) + ".." +
                     std::to_string(hi) + " (the file's configuration is damaged: use a checkpoint from its source)");
  }
}

void check_list(const std::vector<int>& v, std::size_t max_size, int lo, int hi, const std::string& what, const std::string& label) {
  check_range(static_cast<long long>(v.size()), 1, static_cast<long long>(max_size), what + "'s length", label);
  for (int e : v) check_range(e, lo, hi, what + " entry", label);
}

}  // namespace

void validate_config(const ModelConfig& m, const std::string& label) {
  // Ranges far beyond every released model (SDXL: 320 channels, mult 4, 10 transformer layers, 2048
  // context), so that what they build stays small enough to compare with the file before loading.
  const auto& u = m.unet;
  check_range(u.in_channels, 1, 64, "unet in_channels", label);
  check_range(u.out_channels, 1, 64, "unet out_channels", label);
  check_range(u.model_channels, 1, 4096, "unet model_channels", label);
  check_list(u.channel_mult, 8, 1, 64, "unet channel_mult", label);
  check_range(u.num_res_blocks, 1, 16, "unet num_res_blocks", label);
  for (int a : u.attention_resolutions) check_range(a, 1, 1 << 16, "unet attention_resolutions entry", label);
  check_list(u.transformer_depth, 8, 0, 64, "unet transformer_depth", label);
  check_range(u.transformer_depth_middle, 0, 64, "unet transformer_depth_middle", label);
  check_range(u.context_dim, 1, 16384, "unet context_dim", label);
  check_range(u.adm_in_channels, 0, 16384, "unet adm_in_channels", label);
  if (u.num_head_channels > 0) {
    check_range(u.num_head_channels, 1, 4096, "unet num_head_channels", label);
  } else {
    check_range(u.num_heads, 1, 1024, "unet num_heads (with no num_head_channels)", label);
  }
  for (int mult : u.channel_mult) {
    const int width = u.model_channels * mult;
    const int per = u.num_head_channels > 0 ? u.num_head_channels : u.num_heads;
    if (width % per != 0) {
      throw InputError(label + ": ldm.config unet " + (u.num_head_channels > 0 ? "num_head_channels " : "num_heads ") +
                       std::to_string(per) + " does not divide a level's width " + std::to_string(width) +
                       " (the file's configuration is damaged: use a checkpoint from its source)");
    }
  }
  const auto& v = m.vae;
  check_range(v.ch, 1, 1024, "vae ch", label);
  check_list(v.ch_mult, 8, 1, 64, "vae ch_mult", label);
  check_range(v.num_res_blocks, 1, 16, "vae num_res_blocks", label);
  check_range(v.z_channels, 1, 256, "vae z_channels", label);
  check_range(v.embed_dim, 1, 256, "vae embed_dim", label);
  check_range(v.in_channels, 1, 16, "vae in_channels", label);
  check_range(v.out_ch, 1, 16, "vae out_ch", label);
  // 0 or 1e-300 divides the latent into infinities: a black picture
  if (!(std::abs(v.scale_factor) >= 1e-6f && std::abs(v.scale_factor) <= 1e6f) || !std::isfinite(v.shift_factor)) {
    throw InputError(label + ": ldm.config vae scale_factor " + std::to_string(v.scale_factor) +
                     " is not a usable latent scale (SD 1.x uses 0.18215, SDXL 0.13025)");
  }
  if (m.text_encoders.empty() || m.text_encoders.size() > 4) {
    throw InputError(label + ": ldm.config lists " + std::to_string(m.text_encoders.size()) + " text encoders (SD 1.x has 1, SDXL 2)");
  }
  for (const auto& t : m.text_encoders) {
    const std::string te = "text encoder " + t.name + " ";
    check_range(t.width, 1, 16384, te + "width", label);
    check_range(t.layers, 1, 256, te + "layers", label);
    check_range(t.heads, 1, 1024, te + "heads", label);
    if (t.width % t.heads != 0) {
      throw InputError(label + ": ldm.config " + te + "heads " + std::to_string(t.heads) + " do not divide its width " +
                       std::to_string(t.width) + " (the file's configuration is damaged: use a checkpoint from its source)");
    }
    check_range(t.mlp_dim, 1, 65536, te + "mlp_dim", label);
    check_range(t.vocab_size, 1, 1 << 20, te + "vocab_size", label);
    check_range(t.context_length, 1, 4096, te + "context_length", label);
    check_range(t.projection_dim, 0, 16384, te + "projection_dim", label);
    check_range(t.hidden_state_index, 1, t.layers, te + "hidden_state_index", label);
    check_range(t.pad_id, 0, t.vocab_size - 1, te + "pad_id", label);
  }
}

std::string to_ldm_config_json(const ModelConfig& m) {
  using nlohmann::ordered_json;
  const auto& u = m.unet;
  ordered_json unet{{"in_channels", u.in_channels},
                    {"out_channels", u.out_channels},
                    {"model_channels", u.model_channels},
                    {"channel_mult", u.channel_mult},
                    {"num_res_blocks", u.num_res_blocks},
                    {"attention_resolutions", u.attention_resolutions},
                    {"num_heads", u.num_heads},
                    {"num_head_channels", u.num_head_channels},
                    {"transformer_depth", u.transformer_depth},
                    {"transformer_depth_middle", u.transformer_depth_middle},
                    {"context_dim", u.context_dim},
                    {"use_linear_in_transformer", u.use_linear_in_transformer},
                    {"adm_in_channels", u.adm_in_channels > 0 ? ordered_json(u.adm_in_channels)
                                                              : ordered_json(nullptr)}};
  const auto& v = m.vae;
  ordered_json vae{{"ch", v.ch},           {"ch_mult", v.ch_mult},
                   {"num_res_blocks", v.num_res_blocks}, {"z_channels", v.z_channels},
                   {"embed_dim", v.embed_dim}, {"in_channels", v.in_channels},
                   {"out_ch", v.out_ch},   {"double_z", v.double_z},
                   {"attn_resolutions", ordered_json::array()},
                   {"scale_factor", v.scale_factor}};
  ordered_json texts = ordered_json::array();
  for (const auto& t : m.text_encoders) {
    ordered_json e{{"name", t.name},
                   {"prefix", t.prefix},
                   {"layout", t.open_clip_layout ? "open_clip" : "hf"},
                   {"width", t.width},
                   {"layers", t.layers},
                   {"heads", t.heads},
                   {"mlp_dim", t.mlp_dim},
                   {"vocab_size", t.vocab_size},
                   {"context_length", t.context_length},
                   {"activation", t.quick_gelu ? "quick_gelu" : "gelu"},
                   {"hidden_state_index", t.hidden_state_index},
                   {"final_layer_norm", t.final_layer_norm},
                   {"pad_id", t.pad_id}};
    if (t.projection_dim > 0) e["projection_dim"] = t.projection_dim;
    texts.push_back(e);
  }
  ordered_json root{{"model_type", m.arch == Arch::SDXL_BASE ? "sdxl" : "sd1"},
                    {"parameterization", m.parameterization},
                    {"unet", unet},
                    {"vae", vae},
                    {"text_encoders", texts}};
  return root.dump();
}

ModelConfig parse_ldm_config(const std::string& json_text, const std::string& label) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
    const std::string type = j.at("model_type").get<std::string>();
    ModelConfig m = type == "sdxl" ? preset_sdxl_base() : preset_sd15();
    if (type != "sd1" && type != "sdxl") {
      throw InputError(label + ": ldm.config model_type '" + type + "' is not supported (sd1, sdxl)");
    }
    m.ema_scalars = false;
    m.ldm_config_json = json_text;
    m.parameterization = j.value("parameterization", "eps");
    const auto& ju = j.at("unet");
    auto& u = m.unet;
    u.in_channels = whole(ju.at("in_channels"), "in_channels", label);
    u.out_channels = whole(ju.at("out_channels"), "out_channels", label);
    u.model_channels = whole(ju.at("model_channels"), "model_channels", label);
    u.channel_mult = int_list(ju.at("channel_mult"), "channel_mult", label);
    u.num_res_blocks = whole(ju.at("num_res_blocks"), "num_res_blocks", label);
    u.attention_resolutions = int_list(ju.at("attention_resolutions"), "attention_resolutions", label);
    u.num_heads = whole_or(ju, "num_heads", -1, label);
    u.num_head_channels = whole_or(ju, "num_head_channels", -1, label);
    auto depth = int_list(ju.at("transformer_depth"), "transformer_depth", label);
    if (depth.size() == 1) depth.assign(u.channel_mult.size(), depth[0]);
    if (depth.size() != u.channel_mult.size()) {
      throw InputError(label + ": ldm.config transformer_depth does not match channel_mult");
    }
    u.transformer_depth = depth;
    u.transformer_depth_middle = whole_or(ju, "transformer_depth_middle", depth.back(), label);
    u.context_dim = whole(ju.at("context_dim"), "context_dim", label);
    u.use_linear_in_transformer = ju.value("use_linear_in_transformer", false);
    u.adm_in_channels = whole_or(ju, "adm_in_channels", 0, label);
    const auto& jv = j.at("vae");
    auto& v = m.vae;
    v.ch = whole(jv.at("ch"), "ch", label);
    v.ch_mult = int_list(jv.at("ch_mult"), "ch_mult", label);
    v.num_res_blocks = whole(jv.at("num_res_blocks"), "num_res_blocks", label);
    v.z_channels = whole(jv.at("z_channels"), "z_channels", label);
    v.embed_dim = whole_or(jv, "embed_dim", v.z_channels, label);
    v.in_channels = whole_or(jv, "in_channels", 3, label);
    v.out_ch = whole_or(jv, "out_ch", 3, label);
    v.double_z = jv.value("double_z", true);
    v.scale_factor = config_float(jv, "scale_factor", v.scale_factor);
    m.text_encoders.clear();
    for (const auto& jt : j.at("text_encoders")) {
      TextEncoderConfig t;
      t.name = jt.at("name").get<std::string>();
      t.prefix = jt.at("prefix").get<std::string>();
      t.open_clip_layout = jt.value("layout", "hf") == "open_clip";
      t.width = whole(jt.at("width"), "width", label);
      t.layers = whole(jt.at("layers"), "layers", label);
      t.heads = whole(jt.at("heads"), "heads", label);
      t.mlp_dim = whole(jt.at("mlp_dim"), "mlp_dim", label);
      t.vocab_size = whole_or(jt, "vocab_size", 49408, label);
      t.context_length = whole_or(jt, "context_length", 77, label);
      t.quick_gelu = jt.value("activation", "quick_gelu") == "quick_gelu";
      t.projection_dim = whole_or(jt, "projection_dim", 0, label);
      t.position_ids = !t.open_clip_layout;
      t.logit_scale = t.open_clip_layout;
      t.hidden_state_index = whole_or(jt, "hidden_state_index", t.layers, label);
      t.final_layer_norm = jt.value("final_layer_norm", true);
      t.pad_id = whole_or(jt, "pad_id", 49407, label);
      m.text_encoders.push_back(t);
    }
    validate_config(m, label);
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(label + ": ldm.config metadata is malformed (" + std::string(e.what()) + ")");
  }
}

}  // namespace fp8s
