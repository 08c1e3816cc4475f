#include "families/qwenimage/qwenimage_transformer.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "families/flux/flux_model.h"
#include "models/config_json.h"
#include "models/flux/flux.h"
#include "models/op_profile.h"

namespace fp8s {
namespace {

const char* const kWhat = "a Qwen-Image transformer";

// LayerNorm without affine parameters, in FP32.
at::Tensor plain_norm(const at::Tensor& x, double eps) {
  const OpTimer timer(OpKind::Norm);
  return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, {}, {}, eps).to(x.scalar_type());
}

// [B, N, H·D] -> [B, H, N, D]
at::Tensor heads_of(const at::Tensor& x, int64_t heads) {
  return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

}  // namespace

std::optional<std::string> qwenimage_prefix(const SafetensorsFile& file) {
  for (const char* p : {"", "model.diffusion_model."}) {
    if (file.find(std::string(p) + "txt_norm.weight") && file.find(std::string(p) + "img_in.weight") &&
        file.find(std::string(p) + "transformer_blocks.0.img_mod.1.weight")) {
      return std::string(p);
    }
  }
  return std::nullopt;
}

QwenImageConfig qwenimage_config(const SafetensorsFile& f, const std::string& p) {
  auto shape = [&](const std::string& key, std::size_t d) { return static_cast<int>(tensor_dim(f, key, d, kWhat)); };
  QwenImageConfig c;
  c.dim = shape(p + "img_in.weight", 0);
  c.in_channels = shape(p + "img_in.weight", 1);
  c.text_dim = shape(p + "txt_in.weight", 1);
  const int head_dim = shape(p + "transformer_blocks.0.attn.norm_q.weight", 0);
  check_config_value(head_dim, 2, 4096, f.path(), "the transformer's head width (norm_q)");
  if (c.dim % head_dim != 0 || c.in_channels % 4 != 0) {
    throw InputError(f.path() + ": the Qwen-Image transformer's widths do not add up (img_in " + std::to_string(c.dim) + " x " +
                     std::to_string(c.in_channels) + ", heads of " + std::to_string(head_dim) + ")");
  }
  c.heads = c.dim / head_dim;
  c.mlp = shape(p + "transformer_blocks.0.img_mlp.net.0.proj.weight", 0);
  c.timestep_dim = shape(p + "time_text_embed.timestep_embedder.linear_1.weight", 1);
  c.layers = 0;
  while (c.layers < 10000 && f.find(p + "transformer_blocks." + std::to_string(c.layers) + ".img_mod.1.weight")) ++c.layers;
  c.zero_cond_t = f.find(p + "__index_timestep_zero__") != nullptr;
  // the tiny files' own metadata, else a diffusers folder's transformer/config.json
  for (const char* key : {"qwenimage.config", "config.json"}) {
    const auto meta = f.metadata().find(key);
    if (meta == f.metadata().end()) continue;
    read_config_json(meta->second, f.path(), key, [&](const nlohmann::json& j) {
      c.axes_dim = config_int_list(j, "axes_dims_rope", c.axes_dim, f.path(), std::string(key) + " axes_dims_rope");
      c.theta = j.value("rope_theta", c.theta);
      c.eps = j.value("eps", c.eps);
      c.zero_cond_t = c.zero_cond_t || j.value("zero_cond_t", false);
    });
    break;
  }
  check_config_value(c.theta, 1, 1e9, f.path(), "qwenimage.config rope_theta");
  check_config_value(c.eps, 1e-12, 0.1, f.path(), "qwenimage.config eps");
  check_config_value(c.layers, 1, 1000, f.path(), "the transformer's block count");
  check_rope_axes(c.axes_dim, f.path(), "qwenimage.config axes_dims_rope");
  int axes = 0;
  for (const int a : c.axes_dim) axes += a;
  if (axes != head_dim) {
    throw InputError(f.path() + ": the RoPE axes add up to " + std::to_string(axes) + ", the heads are " +
                     std::to_string(head_dim) + " wide");
  }
  return c;
}

QwenImageTransformerImpl::QwenImageTransformerImpl(const QwenImageConfig& c) : config_(c) {
  const int64_t d = c.dim, hd = c.head_dim();
  img_in_ = register_module("img_in", QLinear(c.in_channels, d));
  txt_norm_ = container(*this, "txt_norm")->register_parameter("weight", placeholder({c.text_dim}), false);
  txt_in_ = register_module("txt_in", QLinear(c.text_dim, d));
  auto te = container(*container(*this, "time_text_embed"), "timestep_embedder");
  time1_ = te->register_module("linear_1", QLinear(c.timestep_dim, d));
  time2_ = te->register_module("linear_2", QLinear(d, d));
  add_blocks("transformer_blocks", c.layers, [&](torch::nn::Module& b) {
    Block block;
    auto attn = container(b, "attn");
    auto stream = [&](Stream& s, const char* mod, const char* q, const char* k, const char* v, const char* qn,
                      const char* kn, const char* mlp) {
      s.mod = container(b, mod)->register_module("1", QLinear(d, 6 * d));
      s.q = attn->register_module(q, QLinear(d, d));
      s.k = attn->register_module(k, QLinear(d, d));
      s.v = attn->register_module(v, QLinear(d, d));
      s.q_norm = container(*attn, qn)->register_parameter("weight", placeholder({hd}), false);
      s.k_norm = container(*attn, kn)->register_parameter("weight", placeholder({hd}), false);
      auto net = container(*container(b, mlp), "net");
      s.mlp0 = container(*net, "0")->register_module("proj", QLinear(d, c.mlp));
      s.mlp2 = net->register_module("2", QLinear(c.mlp, d));
    };
    stream(block.img, "img_mod", "to_q", "to_k", "to_v", "norm_q", "norm_k", "img_mlp");
    stream(block.txt, "txt_mod", "add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k", "txt_mlp");
    block.img.out = container(*attn, "to_out")->register_module("0", QLinear(d, d));
    block.txt.out = attn->register_module("to_add_out", QLinear(d, d));
    blocks_.push_back(block);
  });
  norm_out_ = container(*this, "norm_out")->register_module("linear", QLinear(d, 2 * d));
  proj_out_ = register_module("proj_out", QLinear(d, c.in_channels));
}

at::Tensor qwenimage_positions(int64_t text_rows, const std::vector<std::pair<int64_t, int64_t>>& latents) {
  // image f's token (i, j): (f, i - ceil(h'/2), j - ceil(w'/2)); the text starts after the largest
  // image's half-extent, every axis alike
  int64_t start = 0, tokens = 0;
  for (const auto& [h, w] : latents) {
    start = std::max({start, (h / 2) / 2, (w / 2) / 2});
    tokens += (h / 2) * (w / 2);
  }
  auto ids = at::empty({text_rows + tokens, 3}, at::kDouble);
  auto a = ids.accessor<double, 2>();
  for (int64_t k = 0; k < text_rows; ++k) a[k][0] = a[k][1] = a[k][2] = static_cast<double>(start + k);
  int64_t row = text_rows;
  for (std::size_t f = 0; f < latents.size(); ++f) {
    const int64_t gh = latents[f].first / 2, gw = latents[f].second / 2;
    for (int64_t i = 0; i < gh; ++i) {
      for (int64_t j = 0; j < gw; ++j, ++row) {
        a[row][0] = static_cast<double>(f);
        a[row][1] = static_cast<double>(i - (gh + 1) / 2);
        a[row][2] = static_cast<double>(j - (gw + 1) / 2);
      }
    }
  }
  return ids;
}

at::Tensor QwenImageTransformerImpl::embed_time(const at::Tensor& sigma, at::ScalarType compute) const {
  const auto e = flux_timestep_embedding(sigma.to(img_in_->store.weight.device()), config_.timestep_dim).to(compute);
  return time2_->forward(at::silu(time1_->forward(e)));
}

std::vector<at::Tensor> QwenImageTransformerImpl::image_modulation(const Block& b, const at::Tensor& temb, const at::Tensor& temb0,
                                                                   int64_t target_rows, int64_t rows) const {
  auto mod = b.img.mod->forward(at::silu(temb)).unsqueeze(1);  // [B, 1, 6 dim]
  if (temb0.defined() && rows > target_rows) {
    const auto mod0 = b.img.mod->forward(at::silu(temb0)).unsqueeze(1);
    mod = at::cat({mod.expand({-1, target_rows, -1}), mod0.expand({-1, rows - target_rows, -1})}, 1);
  }
  return mod.chunk(6, -1);  // shift, scale, gate (attention), shift, scale, gate (MLP)
}

void QwenImageTransformerImpl::run_block(const Block& b, at::Tensor& img, at::Tensor& txt, const at::Tensor& temb,
                                         const at::Tensor& temb0, int64_t target_rows,
                                         const std::pair<at::Tensor, at::Tensor>& pe, const at::Tensor& mask) const {
  const auto& c = config_;
  const int64_t heads = c.heads, L = txt.size(1);
  const auto im = image_modulation(b, temb, temb0, target_rows, img.size(1));
  const auto tm = b.txt.mod->forward(at::silu(temb)).unsqueeze(1).chunk(6, -1);
  auto modulate = [&](const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
    return plain_norm(x, c.eps) * (1 + scale) + shift;
  };
  const auto ia = modulate(img, im[0], im[1]), ta = modulate(txt, tm[0], tm[1]);
  auto qk = [&](const at::Tensor& a, const QLinear& proj, const at::Tensor& norm) {
    return rms_norm(heads_of(proj->forward(a), heads), norm, c.eps);
  };
  const auto q = at::cat({qk(ta, b.txt.q, b.txt.q_norm), qk(ia, b.img.q, b.img.q_norm)}, 2);
  const auto k = at::cat({qk(ta, b.txt.k, b.txt.k_norm), qk(ia, b.img.k, b.img.k_norm)}, 2);
  const auto v = at::cat({heads_of(b.txt.v->forward(ta), heads), heads_of(b.img.v->forward(ia), heads)}, 2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim()));
  const auto a = attention(flux_apply_rope(q, pe), flux_apply_rope(k, pe), v, scale, mask).transpose(1, 2).flatten(2);
  img = img + im[2] * b.img.out->forward(a.slice(1, L));
  txt = txt + tm[2] * b.txt.out->forward(a.slice(1, 0, L));
  auto mlp = [&](const Stream& s, const at::Tensor& x) { return s.mlp2->forward(at::gelu(s.mlp0->forward(x), "tanh")); };
  img = img + im[5] * mlp(b.img, modulate(img, im[3], im[4]));
  txt = txt + tm[5] * mlp(b.txt, modulate(txt, tm[3], tm[4]));
}

at::Tensor QwenImageTransformerImpl::forward(const at::Tensor& x, const at::Tensor& sigma, const at::Tensor& txt_in,
                                             const at::Tensor& txt_mask, const std::vector<at::Tensor>& refs,
                                             at::ScalarType compute) {
  const InferenceGuard guard;
  const auto& c = config_;
  const auto device = img_in_->store.weight.device();
  const int64_t B = x.size(0), h = x.size(2), w = x.size(3);
  if (x.size(1) * 4 != c.in_channels || h % 2 || w % 2) {
    throw InputError("the Qwen-Image transformer takes a latent of " + std::to_string(c.in_channels / 4) +
                     " channels with even sides");
  }
  std::vector<at::Tensor> packed{flux_pack(x)};
  std::vector<std::pair<int64_t, int64_t>> latents{{h, w}};
  for (const auto& r : refs) {
    packed.push_back(flux_pack(r));
    latents.emplace_back(r.size(2), r.size(3));
  }
  const int64_t target_rows = packed.front().size(1);
  at::Tensor img = img_in_->forward(at::cat(packed, 1).to(device, compute));
  at::Tensor txt = txt_in_->forward(rms_norm(txt_in.to(device, compute), txt_norm_, c.eps));
  const int64_t L = txt.size(1);
  const auto temb = embed_time(sigma.reshape({B}), compute);
  const at::Tensor temb0 = c.zero_cond_t && !refs.empty() ? embed_time(at::zeros({B}), compute) : at::Tensor();
  const auto pe = flux_rope(qwenimage_positions(L, latents).to(device).unsqueeze(0), c.axes_dim, c.theta);
  at::Tensor mask;  // padded text rows are masked as keys
  if (txt_mask.defined() && !txt_mask.to(at::kBool).all().item<bool>()) {
    const auto keep = at::cat({txt_mask.to(device, at::kBool), at::ones({B, img.size(1)}, at::TensorOptions().dtype(at::kBool).device(device))}, 1);
    mask = at::zeros({B, 1, 1, L + img.size(1)}, at::TensorOptions().dtype(compute).device(device))
               .masked_fill(keep.logical_not().view({B, 1, 1, -1}), -std::numeric_limits<float>::infinity());
  }
  int index = 0;
  for (const auto& b : blocks_) {
    const BlockScope staged(hooks_, index++);
    run_block(b, img, txt, temb, temb0, target_rows, pe, mask);
  }
  const auto fm = norm_out_->forward(at::silu(temb)).unsqueeze(1).chunk(2, -1);  // scale, then shift
  const auto y = proj_out_->forward(plain_norm(img.slice(1, 0, target_rows), c.eps) * (1 + fm[0]) + fm[1]);
  return flux_unpack(y.to(at::kFloat), h, w);
}

}  // namespace fp8s
