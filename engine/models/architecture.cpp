#include "models/architecture.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fp8s {
namespace {

const char* const kDdpmBuffers[] = {
    "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod",
    "sqrt_one_minus_alphas_cumprod", "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod",
    "sqrt_recipm1_alphas_cumprod", "posterior_variance", "posterior_log_variance_clipped",
    "posterior_mean_coef1", "posterior_mean_coef2"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Collects the entries of one component under a prefix.
class LayoutBuilder {
 public:
  LayoutBuilder(std::vector<LayoutEntry>& out, Component component, Dtype float_dtype)
      : out_(out), component_(component), float_dtype_(float_dtype) {}

  void add(const std::string& name, std::vector<int64_t> shape, TensorRole role,
           std::optional<Dtype> dtype = std::nullopt) {
    out_.push_back({name, std::move(shape), role, component_, dtype.value_or(float_dtype_)});
  }
  void linear(const std::string& p, int64_t out, int64_t in, bool bias = true,
              TensorRole role = TensorRole::LinearWeight) {
    add(p + ".weight", {out, in}, role);
    if (bias) add(p + ".bias", {out}, TensorRole::Bias);
  }
  void conv(const std::string& p, int64_t out, int64_t in, int64_t k) {
    add(p + ".weight", {out, in, k, k}, TensorRole::ConvWeight);
    add(p + ".bias", {out}, TensorRole::Bias);
  }
  void norm(const std::string& p, int64_t channels) {
    add(p + ".weight", {channels}, TensorRole::NormWeight);
    add(p + ".bias", {channels}, TensorRole::NormBias);
  }

 private:
  std::vector<LayoutEntry>& out_;
  Component component_;
  Dtype float_dtype_;
};

void unet_resblock(LayoutBuilder& b, const std::string& p, int64_t in, int64_t out, int64_t emb) {
  b.norm(p + ".in_layers.0", in);
  b.conv(p + ".in_layers.2", out, in, 3);
  b.linear(p + ".emb_layers.1", out, emb);
  b.norm(p + ".out_layers.0", out);
  b.conv(p + ".out_layers.3", out, out, 3);
  if (in != out) b.conv(p + ".skip_connection", out, in, 1);
}

void unet_transformer(LayoutBuilder& b, const std::string& p, int64_t ch, int depth,
                      const UNetConfig& c) {
  b.norm(p + ".norm", ch);
  if (c.use_linear_in_transformer) {
    b.linear(p + ".proj_in", ch, ch);
    b.linear(p + ".proj_out", ch, ch);
  } else {
    b.conv(p + ".proj_in", ch, ch, 1);
    b.conv(p + ".proj_out", ch, ch, 1);
  }
  for (int d = 0; d < depth; ++d) {
    const std::string t = p + ".transformer_blocks." + std::to_string(d);
    for (const char* attn : {".attn1", ".attn2"}) {
      const int64_t kv_in = std::string(attn) == ".attn1" ? ch : c.context_dim;
      b.linear(t + attn + ".to_q", ch, ch, false);
      b.linear(t + attn + ".to_k", ch, kv_in, false);
      b.linear(t + attn + ".to_v", ch, kv_in, false);
      b.linear(t + attn + ".to_out.0", ch, ch);
    }
    b.linear(t + ".ff.net.0.proj", ch * 8, ch);
    b.linear(t + ".ff.net.2", ch, ch * 4);
    for (const char* n : {".norm1", ".norm2", ".norm3"}) b.norm(t + n, ch);
  }
}

void unet_layout(std::vector<LayoutEntry>& out, const UNetConfig& c, Dtype dtype) {
  LayoutBuilder b(out, Component::UNet, dtype);
  const std::string p = "model.diffusion_model.";
  const int64_t mc = c.model_channels;
  const int64_t emb = 4 * mc;
  b.linear(p + "time_embed.0", emb, mc, true, TensorRole::Embedding);
  b.linear(p + "time_embed.2", emb, emb, true, TensorRole::Embedding);
  if (c.adm_in_channels > 0) {
    b.linear(p + "label_emb.0.0", emb, c.adm_in_channels, true, TensorRole::Embedding);
    b.linear(p + "label_emb.0.2", emb, emb, true, TensorRole::Embedding);
  }
  b.conv(p + "input_blocks.0.0", mc, c.in_channels, 3);
  auto has_attention = [&](int ds, int level) {
    return std::count(c.attention_resolutions.begin(), c.attention_resolutions.end(), ds) > 0 &&
           c.transformer_depth[level] > 0;
  };
  std::vector<int64_t> skip_channels{mc};
  int64_t ch = mc;
  int ds = 1;
  int idx = 1;
  const int levels = static_cast<int>(c.channel_mult.size());
  for (int level = 0; level < levels; ++level) {
    for (int r = 0; r < c.num_res_blocks; ++r) {
      const std::string blk = p + "input_blocks." + std::to_string(idx);
      unet_resblock(b, blk + ".0", ch, c.channel_mult[level] * mc, emb);
      ch = c.channel_mult[level] * mc;
      if (has_attention(ds, level)) unet_transformer(b, blk + ".1", ch, c.transformer_depth[level], c);
      skip_channels.push_back(ch);
      ++idx;
    }
    if (level != levels - 1) {
      b.conv(p + "input_blocks." + std::to_string(idx) + ".0.op", ch, ch, 3);
      skip_channels.push_back(ch);
      ds *= 2;
      ++idx;
    }
  }
  unet_resblock(b, p + "middle_block.0", ch, ch, emb);
  unet_transformer(b, p + "middle_block.1", ch, c.transformer_depth_middle, c);
  unet_resblock(b, p + "middle_block.2", ch, ch, emb);
  idx = 0;
  for (int level = levels - 1; level >= 0; --level) {
    for (int i = 0; i <= c.num_res_blocks; ++i) {
      const std::string blk = p + "output_blocks." + std::to_string(idx);
      const int64_t skip = skip_channels.back();
      skip_channels.pop_back();
      unet_resblock(b, blk + ".0", ch + skip, c.channel_mult[level] * mc, emb);
      ch = c.channel_mult[level] * mc;
      int sub = 1;
      if (has_attention(ds, level)) {
        unet_transformer(b, blk + ".1", ch, c.transformer_depth[level], c);
        sub = 2;
      }
      if (level > 0 && i == c.num_res_blocks) {
        b.conv(blk + "." + std::to_string(sub) + ".conv", ch, ch, 3);
        ds /= 2;
      }
      ++idx;
    }
  }
  b.norm(p + "out.0", ch);
  b.conv(p + "out.2", c.out_channels, mc, 3);
}

void vae_resnet(LayoutBuilder& b, const std::string& p, int64_t in, int64_t out) {
  b.norm(p + ".norm1", in);
  b.conv(p + ".conv1", out, in, 3);
  b.norm(p + ".norm2", out);
  b.conv(p + ".conv2", out, out, 3);
  if (in != out) b.conv(p + ".nin_shortcut", out, in, 1);
}

void vae_attention(LayoutBuilder& b, const std::string& p, int64_t c) {
  b.norm(p + ".norm", c);
  for (const char* n : {".q", ".k", ".v", ".proj_out"}) b.conv(p + n, c, c, 1);
}

void vae_layout(std::vector<LayoutEntry>& out, const VaeConfig& c, Dtype dtype) {
  LayoutBuilder b(out, Component::Vae, dtype);
  const std::string p = "first_stage_model.";
  const int levels = static_cast<int>(c.ch_mult.size());
  // Encoder
  b.conv(p + "encoder.conv_in", c.ch, c.in_channels, 3);
  int64_t block_in = c.ch;
  for (int i = 0; i < levels; ++i) {
    const int64_t block_out = c.ch * c.ch_mult[i];
    for (int j = 0; j < c.num_res_blocks; ++j) {
      vae_resnet(b, p + "encoder.down." + std::to_string(i) + ".block." + std::to_string(j),
                 block_in, block_out);
      block_in = block_out;
    }
    if (i != levels - 1) {
      b.conv(p + "encoder.down." + std::to_string(i) + ".downsample.conv", block_in, block_in, 3);
    }
  }
  vae_resnet(b, p + "encoder.mid.block_1", block_in, block_in);
  vae_attention(b, p + "encoder.mid.attn_1", block_in);
  vae_resnet(b, p + "encoder.mid.block_2", block_in, block_in);
  b.norm(p + "encoder.norm_out", block_in);
  b.conv(p + "encoder.conv_out", (c.double_z ? 2 : 1) * c.z_channels, block_in, 3);
  // Decoder
  block_in = c.ch * c.ch_mult.back();
  b.conv(p + "decoder.conv_in", block_in, c.z_channels, 3);
  vae_resnet(b, p + "decoder.mid.block_1", block_in, block_in);
  vae_attention(b, p + "decoder.mid.attn_1", block_in);
  vae_resnet(b, p + "decoder.mid.block_2", block_in, block_in);
  for (int i = levels - 1; i >= 0; --i) {
    const int64_t block_out = c.ch * c.ch_mult[i];
    for (int j = 0; j <= c.num_res_blocks; ++j) {
      vae_resnet(b, p + "decoder.up." + std::to_string(i) + ".block." + std::to_string(j),
                 block_in, block_out);
      block_in = block_out;
    }
    if (i != 0) b.conv(p + "decoder.up." + std::to_string(i) + ".upsample.conv", block_in, block_in, 3);
  }
  b.norm(p + "decoder.norm_out", block_in);
  b.conv(p + "decoder.conv_out", c.out_ch, block_in, 3);
  b.conv(p + "quant_conv", 2 * c.embed_dim, 2 * c.z_channels, 1);
  b.conv(p + "post_quant_conv", c.z_channels, c.embed_dim, 1);
}

void text_layout(std::vector<LayoutEntry>& out, const TextEncoderConfig& c, Dtype dtype) {
  LayoutBuilder b(out, Component::TextEncoder, dtype);
  const std::string& p = c.prefix;
  const int64_t w = c.width;
  if (!c.open_clip_layout) {
    b.add(p + "embeddings.token_embedding.weight", {c.vocab_size, w}, TensorRole::Embedding);
    b.add(p + "embeddings.position_embedding.weight", {c.context_length, w}, TensorRole::Embedding);
    if (c.position_ids) {
      b.add(p + "embeddings.position_ids", {1, c.context_length}, TensorRole::Buffer, Dtype::I64);
    }
    for (int i = 0; i < c.layers; ++i) {
      const std::string l = p + "encoder.layers." + std::to_string(i);
      for (const char* proj : {".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj",
                               ".self_attn.out_proj"}) {
        b.linear(l + proj, w, w);
      }
      b.norm(l + ".layer_norm1", w);
      b.norm(l + ".layer_norm2", w);
      b.linear(l + ".mlp.fc1", c.mlp_dim, w);
      b.linear(l + ".mlp.fc2", w, c.mlp_dim);
    }
    b.norm(p + "final_layer_norm", w);
    return;
  }
  b.add(p + "token_embedding.weight", {c.vocab_size, w}, TensorRole::Embedding);
  b.add(p + "positional_embedding", {c.context_length, w}, TensorRole::Embedding);
  for (int i = 0; i < c.layers; ++i) {
    const std::string l = p + "transformer.resblocks." + std::to_string(i);
    b.norm(l + ".ln_1", w);
    b.add(l + ".attn.in_proj_weight", {3 * w, w}, TensorRole::LinearWeight);
    b.add(l + ".attn.in_proj_bias", {3 * w}, TensorRole::Bias);
    b.linear(l + ".attn.out_proj", w, w);
    b.norm(l + ".ln_2", w);
    b.linear(l + ".mlp.c_fc", c.mlp_dim, w);
    b.linear(l + ".mlp.c_proj", w, c.mlp_dim);
  }
  b.norm(p + "ln_final", w);
  if (c.projection_dim > 0) b.add(p + "text_projection", {w, c.projection_dim}, TensorRole::Embedding);
  if (c.logit_scale) b.add(p + "logit_scale", {}, TensorRole::Other);
}

TextEncoderConfig clip_l(const std::string& prefix) {
  TextEncoderConfig t;
  t.name = "clip_l";
  t.prefix = prefix;
  t.hidden_state_index = 12;
  return t;
}

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

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::SD1: return "SD 1.x";
    case Arch::SD2: return "SD 2.x";
    case Arch::SDXL_BASE: return "SDXL base";
    case Arch::SDXL_REFINER: return "SDXL refiner";
    case Arch::SD3: return "SD 3";
    case Arch::UNKNOWN: return "unknown";
  }
  return "unknown";
}

const char* component_name(Component component) {
  switch (component) {
    case Component::UNet: return "unet";
    case Component::TextEncoder: return "text";
    case Component::Vae: return "vae";
    case Component::Other: return "other";
  }
  return "other";
}

ModelConfig preset_sd15() {
  ModelConfig m;
  m.arch = Arch::SD1;
  m.text_encoders.push_back(clip_l("cond_stage_model.transformer.text_model."));
  return m;
}

ModelConfig preset_sdxl_base() {
  ModelConfig m;
  m.arch = Arch::SDXL_BASE;
  m.ddpm_buffers = false;
  m.ema_scalars = false;
  auto& u = m.unet;
  u.channel_mult = {1, 2, 4};
  u.attention_resolutions = {4, 2};
  u.num_heads = -1;
  u.num_head_channels = 64;
  u.transformer_depth = {0, 2, 10};
  u.transformer_depth_middle = 10;
  u.context_dim = 2048;
  u.use_linear_in_transformer = true;
  u.adm_in_channels = 2816;
  m.vae.scale_factor = 0.13025f;
  auto l = clip_l("conditioner.embedders.0.transformer.text_model.");
  l.hidden_state_index = 11;
  l.final_layer_norm = false;
  m.text_encoders.push_back(l);
  TextEncoderConfig g;
  g.name = "clip_g";
  g.prefix = "conditioner.embedders.1.model.";
  g.open_clip_layout = true;
  g.width = 1280;
  g.layers = 32;
  g.heads = 20;
  g.mlp_dim = 5120;
  g.quick_gelu = false;
  g.projection_dim = 1280;
  g.position_ids = false;
  g.logit_scale = true;
  g.hidden_state_index = 31;
  g.final_layer_norm = false;
  g.pad_id = 0;
  m.text_encoders.push_back(g);
  return m;
}

ModelConfig preset_tiny_sd1() {
  ModelConfig m = preset_sd15();
  m.ema_scalars = false;
  auto& u = m.unet;
  u.model_channels = 32;
  u.channel_mult = {1, 2, 2};
  u.attention_resolutions = {1, 2};
  u.num_heads = 2;
  u.transformer_depth = {1, 1, 1};
  u.context_dim = 64;
  m.vae.ch = 32;
  m.vae.ch_mult = {1, 1, 2, 2};
  m.vae.num_res_blocks = 1;
  auto& t = m.text_encoders[0];
  t.width = 64;
  t.layers = 3;
  t.heads = 4;
  t.mlp_dim = 256;
  t.hidden_state_index = 3;
  m.ldm_config_json = to_ldm_config_json(m);
  return m;
}

ModelConfig preset_tiny_sdxl() {
  ModelConfig m = preset_sdxl_base();
  auto& u = m.unet;
  u.model_channels = 32;
  u.channel_mult = {1, 2, 2};
  u.attention_resolutions = {2, 4};
  u.num_head_channels = 16;
  u.transformer_depth = {0, 1, 2};
  u.transformer_depth_middle = 2;
  u.context_dim = 160;
  u.adm_in_channels = 1632;
  m.vae.ch = 32;
  m.vae.ch_mult = {1, 1, 2, 2};
  m.vae.num_res_blocks = 1;
  auto& l = m.text_encoders[0];
  l.width = 64;
  l.layers = 3;
  l.heads = 4;
  l.mlp_dim = 256;
  l.hidden_state_index = 2;
  auto& g = m.text_encoders[1];
  g.width = 96;
  g.layers = 3;
  g.heads = 4;
  g.mlp_dim = 384;
  g.projection_dim = 96;
  g.hidden_state_index = 2;
  m.ldm_config_json = to_ldm_config_json(m);
  return m;
}

std::optional<ModelConfig> preset_by_name(const std::string& name) {
  if (name == "sd15") return preset_sd15();
  if (name == "sdxl") return preset_sdxl_base();
  if (name == "tiny-sd1") return preset_tiny_sd1();
  if (name == "tiny-sdxl") return preset_tiny_sdxl();
  return std::nullopt;
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

std::vector<LayoutEntry> checkpoint_layout(const ModelConfig& config, Dtype float_dtype) {
  std::vector<LayoutEntry> out;
  unet_layout(out, config.unet, float_dtype);
  vae_layout(out, config.vae, float_dtype);
  for (const auto& t : config.text_encoders) text_layout(out, t, float_dtype);
  if (config.ddpm_buffers) {
    for (const char* name : kDdpmBuffers) {
      out.push_back({name, {1000}, TensorRole::Buffer, Component::Other, Dtype::F32});
    }
  }
  if (config.ema_scalars) {
    out.push_back({"model_ema.decay", {}, TensorRole::Buffer, Component::Other, Dtype::F32});
    out.push_back({"model_ema.num_updates", {}, TensorRole::Buffer, Component::Other, Dtype::I32});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

Component component_of(const std::string& name) {
  if (starts_with(name, "model.diffusion_model.")) return Component::UNet;
  if (starts_with(name, "first_stage_model.")) return Component::Vae;
  if (starts_with(name, "cond_stage_model.") || starts_with(name, "conditioner.embedders.")) {
    return Component::TextEncoder;
  }
  return Component::Other;
}

TensorRole role_of(const std::string& name, const std::vector<int64_t>& shape) {
  if (ends_with(name, "scale_weight")) return TensorRole::Fp8Scale;
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

std::string Detection::description() const {
  return variant.empty() ? arch_name(arch) : std::string(arch_name(arch)) + " (" + variant + ")";
}

Detection detect_architecture(const ShapeMap& shapes) {
  Detection d;
  auto shape_of = [&](const std::string& key) -> const std::vector<int64_t>* {
    auto it = shapes.find(key);
    return it == shapes.end() ? nullptr : &it->second;
  };
  const std::string u = "model.diffusion_model.";
  if (shape_of(u + "x_embedder.proj.weight")) {
    d.arch = Arch::SD3;
    return d;
  }
  const auto* conv_in = shape_of(u + "input_blocks.0.0.weight");
  if (!conv_in || conv_in->size() != 4) return d;
  const int64_t in_ch = (*conv_in)[1];
  auto in_variant = [&](Arch arch) {
    if (in_ch == 9) return std::string("inpainting");
    if (in_ch == 8 && arch == Arch::SD1) return std::string("instruct-pix2pix");
    if (in_ch != 4) return "in_channels " + std::to_string(in_ch);
    return std::string();
  };
  if (shape_of("conditioner.embedders.1.model.ln_final.weight")) {
    d.arch = Arch::SDXL_BASE;
    d.variant = in_variant(d.arch);
    if (!shape_of(u + "middle_block.1.transformer_blocks.0.attn1.to_q.weight")) d.variant = "SSD-1B";
    return d;
  }
  if (const auto* ln = shape_of("conditioner.embedders.0.model.ln_final.weight")) {
    if (!ln->empty() && (*ln)[0] == 1280) {
      d.arch = Arch::SDXL_REFINER;
    } else {
      d.arch = Arch::SD2;
      d.variant = "sgm layout";
    }
    return d;
  }
  if (const auto* p = shape_of("cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight")) {
    if (p->size() == 2 && (*p)[1] == 1024) {
      d.arch = Arch::SD2;
      d.variant = in_variant(d.arch);
      return d;
    }
  }
  for (const auto& [name, shape] : shapes) {
    if (starts_with(name, "cond_stage_model.transformer.")) {
      d.arch = Arch::SD1;
      d.variant = in_variant(d.arch);
      return d;
    }
  }
  return d;
}

Detection detect_architecture(const SafetensorsFile& file) {
  ShapeMap shapes;
  for (const auto& t : file.tensors()) shapes[t.name] = t.shape;
  return detect_architecture(shapes);
}

ModelConfig config_for(const SafetensorsFile& file) {
  auto it = file.metadata().find("ldm.config");
  if (it != file.metadata().end()) return parse_ldm_config(it->second, file.path());
  const Detection d = detect_architecture(file);
  ModelConfig m;
  if (d.arch == Arch::SD1) {
    m = preset_sd15();
  } else if (d.arch == Arch::SDXL_BASE && d.variant.empty()) {
    m = preset_sdxl_base();
  } else {
    throw InputError(file.path() + ": " + d.description() +
                     " checkpoints are not supported yet (supported: SD 1.x, SDXL base)");
  }
  m.unet.in_channels = static_cast<int>(file.at("model.diffusion_model.input_blocks.0.0.weight").shape[1]);
  m.ema_scalars = file.find("model_ema.decay") != nullptr;
  return m;
}

}  // namespace fp8s
