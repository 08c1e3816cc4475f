#include "models/vae.h"

#include "core/cancel.h"

#include <cmath>

namespace fp8s {

VaeResnetImpl::VaeResnetImpl(int64_t in, int64_t out) {
  norm1_ = register_module("norm1", GroupNorm(32, in, 1e-6));
  conv1_ = register_module("conv1", QConv2d(in, out, 3));
  norm2_ = register_module("norm2", GroupNorm(32, out, 1e-6));
  conv2_ = register_module("conv2", QConv2d(out, out, 3));
  if (in != out) shortcut_ = register_module("nin_shortcut", QConv2d(in, out, 1));
}

at::Tensor VaeResnetImpl::forward(const at::Tensor& x) const {
  auto h = conv1_->forward(at::silu(norm1_->forward(x)));
  h = conv2_->forward(at::silu(norm2_->forward(h)));
  return (shortcut_ ? shortcut_->forward(x) : x) + h;
}

VaeAttentionImpl::VaeAttentionImpl(int64_t c) {
  norm_ = register_module("norm", GroupNorm(32, c, 1e-6));
  q_ = register_module("q", QConv2d(c, c, 1));
  k_ = register_module("k", QConv2d(c, c, 1));
  v_ = register_module("v", QConv2d(c, c, 1));
  proj_ = register_module("proj_out", QConv2d(c, c, 1));
}

at::Tensor VaeAttentionImpl::forward(const at::Tensor& x) const {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  auto n = norm_->forward(x);
  // [b, c, h, w] -> [b, 1, h*w, c]: a view of channels_last activations
  auto tokens = [&](const at::Tensor& t) { return t.permute({0, 2, 3, 1}).reshape({b, 1, h * w, c}); };
  auto a = attention(tokens(q_->forward(n)), tokens(k_->forward(n)), tokens(v_->forward(n)),
                            1.0 / std::sqrt(double(c)));
  return x + proj_->forward(a.reshape({b, h, w, c}).permute({0, 3, 1, 2}).contiguous(x.suggest_memory_format()));
}

VaeImpl::VaeImpl(const VaeConfig& c) : config_(c) {
  const int levels = static_cast<int>(c.ch_mult.size());
  auto enc = container(*this, "encoder");
  enc_in_ = enc->register_module("conv_in", QConv2d(c.in_channels, c.ch, 3));
  auto down = container(*enc, "down");
  int64_t block_in = c.ch;
  for (int i = 0; i < levels; ++i) {
    auto lvl = container(*down, std::to_string(i));
    auto blocks = container(*lvl, "block");
    Level level;
    const int64_t block_out = c.ch * c.ch_mult[i];
    for (int j = 0; j < c.num_res_blocks; ++j) {
      level.blocks.push_back(blocks->register_module(std::to_string(j), VaeResnet(block_in, block_out)));
      block_in = block_out;
    }
    if (i != levels - 1) {
      level.resample = container(*lvl, "downsample")->register_module("conv", QConv2d(block_in, block_in, 3, 2, 0));
    }
    down_.push_back(level);
  }
  auto emid = container(*enc, "mid");
  enc_mid1_ = emid->register_module("block_1", VaeResnet(block_in, block_in));
  enc_attn_ = emid->register_module("attn_1", VaeAttention(block_in));
  enc_mid2_ = emid->register_module("block_2", VaeResnet(block_in, block_in));
  enc_norm_ = enc->register_module("norm_out", GroupNorm(32, block_in, 1e-6));
  enc_out_ = enc->register_module("conv_out",
                                  QConv2d(block_in, (c.double_z ? 2 : 1) * c.z_channels, 3));

  auto dec = container(*this, "decoder");
  block_in = c.ch * c.ch_mult.back();
  dec_in_ = dec->register_module("conv_in", QConv2d(c.z_channels, block_in, 3));
  auto dmid = container(*dec, "mid");
  dec_mid1_ = dmid->register_module("block_1", VaeResnet(block_in, block_in));
  dec_attn_ = dmid->register_module("attn_1", VaeAttention(block_in));
  dec_mid2_ = dmid->register_module("block_2", VaeResnet(block_in, block_in));
  auto up = container(*dec, "up");
  up_.resize(static_cast<std::size_t>(levels));
  for (int i = levels - 1; i >= 0; --i) {
    auto lvl = container(*up, std::to_string(i));
    auto blocks = container(*lvl, "block");
    const int64_t block_out = c.ch * c.ch_mult[i];
    for (int j = 0; j <= c.num_res_blocks; ++j) {
      up_[i].blocks.push_back(blocks->register_module(std::to_string(j), VaeResnet(block_in, block_out)));
      block_in = block_out;
    }
    if (i != 0) up_[i].resample = container(*lvl, "upsample")->register_module("conv", QConv2d(block_in, block_in, 3));
  }
  dec_norm_ = dec->register_module("norm_out", GroupNorm(32, block_in, 1e-6));
  dec_out_ = dec->register_module("conv_out", QConv2d(block_in, c.out_ch, 3));
  if (c.quant_convs) {
    quant_ = (c.quant_convs_in_coders ? *enc : *this).register_module("quant_conv", QConv2d(2 * c.z_channels, 2 * c.embed_dim, 1));
    post_quant_ = (c.quant_convs_in_coders ? *dec : *this).register_module("post_quant_conv", QConv2d(c.embed_dim, c.z_channels, 1));
  }
}

at::Tensor VaeImpl::encode(const at::Tensor& image, at::ScalarType compute) {
  // SD: mean · scale; Flux's autoencoder: scale · (mean − shift)
  return (encode_moments(image, compute).slice(1, 0, config_.embed_dim).to(at::kFloat) - config_.shift_factor) *
         config_.scale_factor;
}

at::Tensor VaeImpl::encode_moments(const at::Tensor& image, at::ScalarType compute) {
  InferenceGuard no_grad;
  auto h = enc_in_->forward(as_activation(image, compute));
  for (const auto& level : down_) {
    cancel_point();
    for (const auto& b : level.blocks) h = b->forward(h);
    if (level.resample) h = level.resample->forward(at::constant_pad_nd(h, {0, 1, 0, 1}, 0));
  }
  h = enc_mid2_->forward(enc_attn_->forward(enc_mid1_->forward(h)));
  h = enc_out_->forward(at::silu(enc_norm_->forward(h)));
  if (quant_) h = quant_->forward(h);
  return h.to(at::kFloat).contiguous();
}

at::Tensor VaeImpl::decode(const at::Tensor& latent, at::ScalarType compute) {
  InferenceGuard no_grad;
  auto z = as_activation(latent.to(at::kFloat) / config_.scale_factor + config_.shift_factor, compute);
  if (post_quant_) z = post_quant_->forward(z);
  auto h = dec_in_->forward(z);
  h = dec_mid2_->forward(dec_attn_->forward(dec_mid1_->forward(h)));
  for (int i = static_cast<int>(up_.size()) - 1; i >= 0; --i) {
    cancel_point();
    for (const auto& b : up_[i].blocks) h = b->forward(h);
    if (up_[i].resample) {
      h = up_[i].resample->forward(at::upsample_nearest2d(h, {h.size(2) * 2, h.size(3) * 2}));
    }
  }
  h = dec_out_->forward(at::silu(dec_norm_->forward(h)));
  return h.to(at::kFloat).contiguous();
}

}  // namespace fp8s
