// The `ldm.config` metadata JSON: parse (with errors naming the file) and write.
#include "models/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fp8s {
namespace {

std::vector<int> int_list(const nlohmann::json& j, const std::string& what, const std::string& label) {
  std::vector<int> v;
  if (j.is_number_integer()) return {j.get<int>()};
  if (!j.is_array()) throw InputError(label + ": ldm.config '" + what + "' is not a list");
  for (const auto& e : j) {
    if (!e.is_number_integer()) throw InputError(label + ": ldm.config '" + what + "' holds a non-integer");
    v.push_back(e.get<int>());
  }
  return v;
}

}  // namespace

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
    u.in_channels = ju.at("in_channels").get<int>();
    u.out_channels = ju.at("out_channels").get<int>();
    u.model_channels = ju.at("model_channels").get<int>();
    u.channel_mult = int_list(ju.at("channel_mult"), "channel_mult", label);
    u.num_res_blocks = ju.at("num_res_blocks").get<int>();
    u.attention_resolutions = int_list(ju.at("attention_resolutions"), "attention_resolutions", label);
    u.num_heads = ju.value("num_heads", -1);
    u.num_head_channels = ju.value("num_head_channels", -1);
    auto depth = int_list(ju.at("transformer_depth"), "transformer_depth", label);
    if (depth.size() == 1) depth.assign(u.channel_mult.size(), depth[0]);
    if (depth.size() != u.channel_mult.size()) {
      throw InputError(label + ": ldm.config transformer_depth does not match channel_mult");
    }
    u.transformer_depth = depth;
    u.transformer_depth_middle = ju.contains("transformer_depth_middle") &&
                                         !ju["transformer_depth_middle"].is_null()
                                     ? ju["transformer_depth_middle"].get<int>()
                                     : depth.back();
    u.context_dim = ju.at("context_dim").get<int>();
    u.use_linear_in_transformer = ju.value("use_linear_in_transformer", false);
    u.adm_in_channels = ju.contains("adm_in_channels") && !ju["adm_in_channels"].is_null()
                            ? ju["adm_in_channels"].get<int>()
                            : 0;
    const auto& jv = j.at("vae");
    auto& v = m.vae;
    v.ch = jv.at("ch").get<int>();
    v.ch_mult = int_list(jv.at("ch_mult"), "ch_mult", label);
    v.num_res_blocks = jv.at("num_res_blocks").get<int>();
    v.z_channels = jv.at("z_channels").get<int>();
    v.embed_dim = jv.value("embed_dim", v.z_channels);
    v.in_channels = jv.value("in_channels", 3);
    v.out_ch = jv.value("out_ch", 3);
    v.double_z = jv.value("double_z", true);
    v.scale_factor = jv.value("scale_factor", v.scale_factor);
    m.text_encoders.clear();
    for (const auto& jt : j.at("text_encoders")) {
      TextEncoderConfig t;
      t.name = jt.at("name").get<std::string>();
      t.prefix = jt.at("prefix").get<std::string>();
      t.open_clip_layout = jt.value("layout", "hf") == "open_clip";
      t.width = jt.at("width").get<int>();
      t.layers = jt.at("layers").get<int>();
      t.heads = jt.at("heads").get<int>();
      t.mlp_dim = jt.at("mlp_dim").get<int>();
      t.vocab_size = jt.value("vocab_size", 49408);
      t.context_length = jt.value("context_length", 77);
      t.quick_gelu = jt.value("activation", "quick_gelu") == "quick_gelu";
      t.projection_dim = jt.value("projection_dim", 0);
      t.position_ids = !t.open_clip_layout;
      t.logit_scale = t.open_clip_layout;
      t.hidden_state_index = jt.value("hidden_state_index", t.layers);
      t.final_layer_norm = jt.value("final_layer_norm", true);
      t.pad_id = jt.value("pad_id", 49407);
      m.text_encoders.push_back(t);
    }
    for (int d : u.channel_mult) {
      if (d <= 0) throw InputError(label + ": ldm.config channel_mult must be positive");
    }
    if (u.model_channels <= 0 || u.num_res_blocks <= 0 || v.ch <= 0 || m.text_encoders.empty()) {
      throw InputError(label + ": ldm.config has non-positive sizes or no text encoder");
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(label + ": ldm.config metadata is malformed (" + std::string(e.what()) + ")");
  }
}

}  // namespace fp8s
