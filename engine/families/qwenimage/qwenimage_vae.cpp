#include "families/qwenimage/qwenimage_vae.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/config_json.h"
#include "models/op_profile.h"

namespace fp8s {
namespace {

using Conv = QwenImageVaeImpl::Conv;

// A convolution's weight ([out, in, k, k, k] causal 3-D, or [out, in, k, k] 2-D) and bias under `name`.
Conv register_conv(torch::nn::Module& parent, const std::string& name, int64_t out, int64_t in, int64_t k, bool three_d) {
  auto m = container(parent, name);
  std::vector<int64_t> shape{out, in, k, k};
  if (three_d) shape.insert(shape.begin() + 2, k);
  return {m->register_parameter("weight", placeholder(shape), false), m->register_parameter("bias", placeholder({out}), false)};
}

at::Tensor register_gamma(torch::nn::Module& parent, const std::string& name, int64_t channels, bool images) {
  std::vector<int64_t> shape{channels, 1, 1};
  if (!images) shape.push_back(1);
  return container(parent, name)->register_parameter("gamma", placeholder(shape), false);
}

QwenImageVaeImpl::Residual register_residual(torch::nn::Module& parent, const std::string& name, int64_t in, int64_t out) {
  auto m = container(parent, name);
  auto r = container(*m, "residual");
  QwenImageVaeImpl::Residual res;
  res.norm1 = register_gamma(*r, "0", in, false);
  res.conv1 = register_conv(*r, "2", out, in, 3, true);
  res.norm2 = register_gamma(*r, "3", out, false);
  res.conv2 = register_conv(*r, "6", out, out, 3, true);
  if (in != out) res.shortcut = register_conv(*m, "shortcut", out, in, 1, true);
  return res;
}

// A causal convolution on one frame: the last temporal slice of a 3-D kernel as a 2-D one, padded
// k/2 on each side; a 2-D kernel with `padding` and `stride`. Computed in `ct`; the result in FP32
// (the stream between the convolutions stays FP32: in BF16 its rounding adds up over 30 blocks).
at::Tensor conv(at::ScalarType ct, const Conv& c, const at::Tensor& x, int64_t padding = -1, int64_t stride = 1) {
  const OpTimer timer(OpKind::Conv);
  at::Tensor w = c.weight.dim() == 5 ? c.weight.select(2, c.weight.size(2) - 1) : c.weight;
  if (padding < 0) padding = w.size(-1) / 2;
  return at::conv2d(x.to(ct), w.to(ct), c.bias.to(ct), stride, padding).to(at::kFloat);
}

// RMS_norm: x / max(‖x‖ over the channels, 1e-12) · √C · gamma, in FP32.
at::Tensor rms(const at::Tensor& x, const at::Tensor& gamma) {
  const OpTimer timer(OpKind::Norm);
  const auto xf = x.to(at::kFloat);
  const auto norm = xf.pow(2).sum(1, true).sqrt().clamp_min(1e-12);
  const double root = std::sqrt(static_cast<double>(x.size(1)));
  return (xf / norm * root * gamma.to(at::kFloat).reshape({1, -1, 1, 1})).to(x.scalar_type());
}

at::Tensor residual(at::ScalarType ct, const QwenImageVaeImpl::Residual& r, const at::Tensor& x) {
  const auto h = r.shortcut.weight.defined() ? conv(ct, r.shortcut, x) : x;
  auto y = conv(ct, r.conv1, at::silu(rms(x, r.norm1)));
  y = conv(ct, r.conv2, at::silu(rms(y, r.norm2)));
  return y + h;
}

// One head over the pixels, scale 1/√C, then the projection, added to the input.
at::Tensor self_attention(at::ScalarType ct, const QwenImageVaeImpl::Attention& a, const at::Tensor& x) {
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const auto qkv = conv(ct, a.qkv, rms(x, a.norm)).to(ct).reshape({B, 3 * C, H * W}).transpose(1, 2).unsqueeze(1).chunk(3, -1);
  const auto out = attention(qkv[0], qkv[1], qkv[2], 1.0 / std::sqrt(static_cast<double>(C)));  // [B, 1, HW, C]
  return x + conv(ct, a.proj, out.squeeze(1).transpose(1, 2).reshape({B, C, H, W}));
}

}  // namespace

std::vector<QwenImageTemporalConv> qwenimage_vae_temporal_convs(const QwenImageVaeConfig& c) {
  // level i's resample follows its residual blocks (num_res_blocks, the decoder's one more); it is
  // as wide as the level's output (the encoder's base·mult[i], the decoder's base·mult[levels-1-i],
  // whose temporal conv doubles the channels); the decoder runs the encoder's temporal flags backwards
  std::vector<QwenImageTemporalConv> convs;
  const int levels = static_cast<int>(c.dim_mult.size());
  for (int i = 0; i + 1 < levels; ++i) {
    if (c.temporal_down[static_cast<std::size_t>(i)]) {
      const int64_t w = static_cast<int64_t>(c.base_dim) * c.dim_mult[static_cast<std::size_t>(i)];
      convs.push_back({"encoder.downsamples." + std::to_string((i + 1) * c.num_res_blocks + i) + ".time_conv", w, w});
    }
    if (c.temporal_down[static_cast<std::size_t>(levels - 2 - i)]) {
      const int64_t w = static_cast<int64_t>(c.base_dim) * c.dim_mult[static_cast<std::size_t>(levels - 1 - i)];
      convs.push_back({"decoder.upsamples." + std::to_string((i + 1) * (c.num_res_blocks + 1) + i) + ".time_conv", 2 * w, w});
    }
  }
  return convs;
}

std::vector<std::string> qwenimage_vae_temporal_keys(const QwenImageVaeConfig& c) {
  std::vector<std::string> keys;
  for (const auto& t : qwenimage_vae_temporal_convs(c)) {
    keys.push_back(t.prefix + ".weight");
    keys.push_back(t.prefix + ".bias");
  }
  return keys;
}

bool is_qwenimage_vae(const SafetensorsFile& f, const std::string& p) {
  return f.find(p + "decoder.middle.0.residual.0.gamma") && f.find(p + "encoder.conv1.weight") && f.find(p + "conv2.weight");
}

QwenImageVaeConfig qwenimage_vae_config(const SafetensorsFile& f, const std::string& p) {
  const std::string what = "Qwen-Image's autoencoder (the Wan 2.1 VAE)";
  if (!is_qwenimage_vae(f, p)) throw InputError(f.path() + ": not " + what + " (no decoder.middle.0.residual.0.gamma)");
  QwenImageVaeConfig c;
  c.base_dim = static_cast<int>(tensor_dim(f, p + "encoder.conv1.weight", 0, what));
  c.z_dim = static_cast<int>(tensor_dim(f, p + "conv2.weight", 0, what));
  // the tiny files' own metadata, else a diffusers folder's vae/config.json (the same fields)
  for (const char* source : {"qwenimage_vae.config", "config.json"}) {
    const auto meta = f.metadata().find(source);
    if (meta == f.metadata().end()) continue;
    read_config_json(meta->second, f.path(), source, [&](const nlohmann::json& j) {
      read_int_fields(j, f.path(), "qwenimage_vae.config", {{"num_res_blocks", &c.num_res_blocks}});
      c.dim_mult = config_int_list(j, "dim_mult", c.dim_mult, f.path(), "qwenimage_vae.config dim_mult");
      if (j.contains("temperal_downsample") && j["temperal_downsample"].is_array()) {
        c.temporal_down.clear();
        for (const auto& v : j["temperal_downsample"]) c.temporal_down.push_back(v.is_boolean() && v.get<bool>());
      }
      for (auto [key, field] : {std::pair{"latents_mean", &c.latents_mean}, std::pair{"latents_std", &c.latents_std}}) {
        if (!j.contains(key) || !j[key].is_array()) continue;
        field->clear();
        for (const auto& v : j[key]) field->push_back(v.is_number() ? v.get<float>() : 0.0f);
      }
    });
    break;
  }
  check_config_value(c.num_res_blocks, 1, 16, f.path(), "qwenimage_vae.config num_res_blocks");
  check_config_value(static_cast<double>(c.dim_mult.size()), 2, 6, f.path(), "qwenimage_vae.config dim_mult's length");
  for (const int m : c.dim_mult) check_config_value(m, 1, 64, f.path(), "qwenimage_vae.config dim_mult entry");
  if (c.temporal_down.size() + 1 != c.dim_mult.size() || c.latents_mean.size() != static_cast<std::size_t>(c.z_dim) ||
      c.latents_std.size() != static_cast<std::size_t>(c.z_dim)) {
    throw InputError(f.path() + ": the autoencoder's configuration does not add up (levels, temporal flags, " +
                     std::to_string(c.z_dim) + " latent channels' mean and std)");
  }
  for (const float s : c.latents_std) {
    if (!(s > 0) || !std::isfinite(s)) throw InputError(f.path() + ": a latent channel's std is not a positive number");
  }
  return c;
}

QwenImageVaeImpl::QwenImageVaeImpl(const QwenImageVaeConfig& c) : config_(c) {
  const int levels = static_cast<int>(c.dim_mult.size());
  // encoder widths base·[1, mult...]; decoder base·[mult_last, mult reversed...]
  std::vector<int64_t> down{c.base_dim}, up{static_cast<int64_t>(c.base_dim) * c.dim_mult.back()};
  for (int i = 0; i < levels; ++i) {
    down.push_back(static_cast<int64_t>(c.base_dim) * c.dim_mult[static_cast<std::size_t>(i)]);
    up.push_back(static_cast<int64_t>(c.base_dim) * c.dim_mult[static_cast<std::size_t>(levels - 1 - i)]);
  }
  auto coder = [&](const char* name, Coder& coder, const std::vector<int64_t>& dims, bool decoder) {
    auto m = container(*this, name);
    coder.conv_in = register_conv(*m, "conv1", dims[0], decoder ? c.z_dim : 3, 3, true);
    auto list = container(*m, decoder ? "upsamples" : "downsamples");
    int k = 0;
    for (int i = 0; i < levels; ++i) {
      int64_t in = dims[static_cast<std::size_t>(i)], out = dims[static_cast<std::size_t>(i) + 1];
      if (decoder && i > 0) in /= 2;  // the previous level's upsample halved the width
      for (int r = 0; r < c.num_res_blocks + (decoder ? 1 : 0); ++r, in = out) {
        Stage s;
        s.res = register_residual(*list, std::to_string(k++), in, out);
        coder.stages.push_back(s);
      }
      if (i == levels - 1) continue;
      Stage s;
      s.is_resample = true;
      auto rm = container(*list, std::to_string(k));
      s.resample = register_conv(*container(*rm, "resample"), "1", decoder ? out / 2 : out, out, 3, false);
      ++k;
      coder.stages.push_back(s);
    }
    auto mid = container(*m, "middle");
    const int64_t md = decoder ? dims[0] : dims.back();
    coder.mid1 = register_residual(*mid, "0", md, md);
    auto attn = container(*mid, "1");
    coder.attn.norm = register_gamma(*attn, "norm", md, true);
    coder.attn.qkv = register_conv(*attn, "to_qkv", 3 * md, md, 1, false);
    coder.attn.proj = register_conv(*attn, "proj", md, md, 1, false);
    coder.mid2 = register_residual(*mid, "2", md, md);
    auto head = container(*m, "head");
    coder.head_norm = register_gamma(*head, "0", dims.back(), false);
    coder.head_conv = register_conv(*head, "2", decoder ? 3 : 2 * c.z_dim, dims.back(), 3, true);
  };
  coder("encoder", encoder_, down, false);
  coder("decoder", decoder_, up, true);
  quant_ = register_conv(*this, "conv1", 2 * c.z_dim, 2 * c.z_dim, 1, true);
  post_quant_ = register_conv(*this, "conv2", c.z_dim, c.z_dim, 1, true);
}

at::Tensor QwenImageVaeImpl::run_coder(const Coder& c, at::Tensor x, bool decoder, at::ScalarType ct) const {
  x = conv(ct, c.conv_in, x);
  auto middle = [&] {
    x = residual(ct, c.mid1, x);
    x = self_attention(ct, c.attn, x);
    x = residual(ct, c.mid2, x);
  };
  if (decoder) middle();
  for (const auto& s : c.stages) {
    if (!s.is_resample) {
      x = residual(ct, s.res, x);
    } else if (decoder) {  // nearest ×2 (each pixel to a 2×2 block), then a 3×3 conv that halves the width
      x = conv(ct, s.resample, at::upsample_nearest2d(x, {2 * x.size(2), 2 * x.size(3)}), 1);
    } else {  // zero-pad right and bottom, then a 3×3 conv of stride 2
      x = conv(ct, s.resample, at::constant_pad_nd(x, {0, 1, 0, 1}), 0, 2);
    }
  }
  if (!decoder) middle();
  return conv(ct, c.head_conv, at::silu(rms(x, c.head_norm)));
}

at::Tensor QwenImageVaeImpl::moments(const at::Tensor& image, at::ScalarType compute) const {
  const InferenceGuard guard;
  const int f = config_.factor();
  if (image.size(1) != 3 || image.size(2) % f || image.size(3) % f) {
    throw InputError("the Qwen-Image autoencoder encodes RGB images whose sides are multiples of " + std::to_string(f));
  }
  const auto x = image.to(quant_.weight.device(), at::kFloat);
  const auto m = conv(compute, quant_, run_coder(encoder_, x, false, compute));
  return at::cat({m.slice(1, 0, config_.z_dim), m.slice(1, config_.z_dim).clamp(-30, 20)}, 1);
}

at::Tensor QwenImageVaeImpl::normalise(const at::Tensor& z) const {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(z.device());
  const auto mean = at::tensor(config_.latents_mean, opts).view({1, -1, 1, 1});
  const auto std = at::tensor(config_.latents_std, opts).view({1, -1, 1, 1});
  return (z.to(at::kFloat) - mean) / std;
}

at::Tensor QwenImageVaeImpl::denormalise(const at::Tensor& latent) const {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(latent.device());
  const auto mean = at::tensor(config_.latents_mean, opts).view({1, -1, 1, 1});
  const auto std = at::tensor(config_.latents_std, opts).view({1, -1, 1, 1});
  return latent.to(at::kFloat) * std + mean;
}

at::Tensor QwenImageVaeImpl::encode(const at::Tensor& image, at::ScalarType compute) const {
  return normalise(moments(image, compute).slice(1, 0, config_.z_dim));
}

at::Tensor QwenImageVaeImpl::decode(const at::Tensor& latent, at::ScalarType compute) const {
  const InferenceGuard guard;
  if (latent.size(1) != config_.z_dim) {
    throw InputError("the Qwen-Image autoencoder decodes latents of " + std::to_string(config_.z_dim) + " channels");
  }
  const auto z = denormalise(latent.to(quant_.weight.device()));
  return run_coder(decoder_, conv(compute, post_quant_, z), true, compute).clamp(-1, 1);
}

}  // namespace fp8s
