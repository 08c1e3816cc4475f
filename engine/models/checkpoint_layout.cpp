// The exact key layout (names, shapes, roles, dtypes) a configuration implies, per component.
#include "models/checkpoint_layout.h"

#include <algorithm>
#include <optional>

namespace fp8s {
namespace {

const char* const kDdpmBuffers[] = {
    "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod",
    "sqrt_one_minus_alphas_cumprod", "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod",
    "sqrt_recipm1_alphas_cumprod", "posterior_variance", "posterior_log_variance_clipped",
    "posterior_mean_coef1", "posterior_mean_coef2"};

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
  const std::string p = kUNetPrefix;
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
  const std::string p = kVaePrefix;
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

}  // namespace

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

}  // namespace fp8s
