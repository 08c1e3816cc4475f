#include "families/zimage/zimage_transformer.h"

#include <cmath>

#include "core/error.h"
#include "models/config_json.h"
#include "models/fp8_files.h"
#include "models/flux/flux.h"

namespace fp8s {
namespace {


constexpr int64_t kTokenMultiple = 32;  // image and caption rows are padded to a multiple of 32


int count(const SafetensorsFile& f, const std::string& group) {
  int n = 0;
  while (f.find(group + std::to_string(n) + ".attention.qkv.weight")) ++n;
  return n;
}



int64_t padded(int64_t n) { return (n + kTokenMultiple - 1) / kTokenMultiple * kTokenMultiple; }

}  // namespace

ZImageConfig zimage_config(const SafetensorsFile& f, const std::string& p) {
  auto shape = [&](const std::string& key, std::size_t d) { return static_cast<int>(tensor_dim(f, key, d, "a Z-Image transformer")); };
  ZImageConfig c;
  // the tiny files' own metadata, else a model folder's config.json (the same names)
  auto meta = f.metadata().find("zimage.config");
  if (meta == f.metadata().end()) meta = f.metadata().find("config.json");
  if (meta != f.metadata().end()) {
    read_config_json(meta->second, f.path(), meta->first.c_str(), [&](const nlohmann::json& j) {
      c.axes_dims = config_int_list(j, "axes_dims", c.axes_dims, f.path(), meta->first + " axes_dims");
      c.rope_theta = j.value("rope_theta", c.rope_theta);
      c.t_scale = j.value("t_scale", c.t_scale);
      c.eps = j.value("norm_eps", c.eps);
    });
    const std::string key = meta->first;
    check_config_value(c.rope_theta, 1, 1e9, f.path(), key + " rope_theta");
    check_config_value(c.t_scale, 1e-3, 1e6, f.path(), key + " t_scale");
    check_config_value(c.eps, 1e-12, 0.1, f.path(), key + " norm_eps");
    check_rope_axes(c.axes_dims, f.path(), key + " axes_dims");
  }
  c.dim = shape(p + "x_embedder.weight", 0);
  c.channels = static_cast<int>(shape(p + "x_embedder.weight", 1) / (c.patch * c.patch));
  c.head_dim = shape(p + "layers.0.attention.q_norm.weight", 0);
  check_config_value(c.head_dim, 2, 4096, f.path(), "the transformer's head width (q_norm)");
  c.heads = c.dim / c.head_dim;
  c.cap_dim = shape(p + "cap_embedder.0.weight", 0);
  // a padded comfy_quant layer's stored rows are not its own (mxfp8 to 32, nvfp4 to 16): then the
  // width diffusers builds, int(dim / 3 * 8)
  const auto w1 = comfy_quant_layer(f, p + "layers.0.feed_forward.w1.weight");
  c.ffn = w1 && is_block_format(w1->format) ? c.dim * 8 / 3 : shape(p + "layers.0.feed_forward.w1.weight", 0);
  c.adaln = shape(p + "t_embedder.mlp.2.weight", 0);
  c.t_mid = shape(p + "t_embedder.mlp.0.weight", 0);
  c.layers = count(f, p + "layers.");
  c.noise_refiners = count(f, p + "noise_refiner.");
  c.context_refiners = count(f, p + "context_refiner.");
  int axes = 0;
  for (const int a : c.axes_dims) axes += a;
  if (c.layers == 0 || c.heads * c.head_dim != c.dim || axes != c.head_dim || c.axes_dims.size() != 3) {
    throw InputError(f.path() + ": the Z-Image transformer's sizes do not add up (dim, heads, head_dim and the RoPE axes)");
  }
  return c;
}

ZImageTransformerImpl::Block ZImageTransformerImpl::make_block(const std::string& group, int index, bool modulated) {
  const auto& c = config_;
  std::shared_ptr<torch::nn::Module> parent;
  for (const auto& child : named_children()) {
    if (child.key() == group) parent = child.value();
  }
  if (!parent) parent = container(*this, group);
  auto m = container(*parent, std::to_string(index));
  auto attn = container(*m, "attention");
  auto ff = container(*m, "feed_forward");
  Block b;
  b.modulated = modulated;
  b.qkv = attn->register_module("qkv", QLinear(c.dim, 3 * c.dim, false));
  b.out = attn->register_module("out", QLinear(c.dim, c.dim, false));
  b.q_norm = container(*attn, "q_norm")->register_parameter("weight", placeholder({c.head_dim}), false);
  b.k_norm = container(*attn, "k_norm")->register_parameter("weight", placeholder({c.head_dim}), false);
  for (auto [name, w] : {std::pair{"attention_norm1", &b.attn_norm1}, std::pair{"attention_norm2", &b.attn_norm2},
                         std::pair{"ffn_norm1", &b.ffn_norm1}, std::pair{"ffn_norm2", &b.ffn_norm2}}) {
    *w = container(*m, name)->register_parameter("weight", placeholder({c.dim}), false);
  }
  b.w1 = ff->register_module("w1", QLinear(c.dim, c.ffn, false));
  b.w2 = ff->register_module("w2", QLinear(c.ffn, c.dim, false));
  b.w3 = ff->register_module("w3", QLinear(c.dim, c.ffn, false));
  if (modulated) b.ada = container(*m, "adaLN_modulation")->register_module("0", QLinear(c.adaln, 4 * c.dim, true));
  network_blocks_.push_back({group + "." + std::to_string(index), m, 1.0});
  return b;
}

ZImageTransformerImpl::ZImageTransformerImpl(const ZImageConfig& c) : config_(c) {
  const int64_t patch_features = int64_t(c.patch) * c.patch * c.channels;
  x_embedder_ = register_module("x_embedder", QLinear(patch_features, c.dim, true));
  auto mlp = container(*container(*this, "t_embedder"), "mlp");
  t_mlp0_ = mlp->register_module("0", QLinear(256, c.t_mid, true));
  t_mlp2_ = mlp->register_module("2", QLinear(c.t_mid, c.adaln, true));
  auto cap = container(*this, "cap_embedder");
  cap_norm_ = container(*cap, "0")->register_parameter("weight", placeholder({c.cap_dim}), false);
  cap_linear_ = cap->register_module("1", QLinear(c.cap_dim, c.dim, true));
  x_pad_ = register_parameter("x_pad_token", placeholder({1, c.dim}), false);
  cap_pad_ = register_parameter("cap_pad_token", placeholder({1, c.dim}), false);
  for (int i = 0; i < c.noise_refiners; ++i) noise_refiner_.push_back(make_block("noise_refiner", i, true));
  for (int i = 0; i < c.context_refiners; ++i) context_refiner_.push_back(make_block("context_refiner", i, false));
  for (int i = 0; i < c.layers; ++i) layers_.push_back(make_block("layers", i, true));
  auto final_layer = container(*this, "final_layer");
  final_ada_ = container(*final_layer, "adaLN_modulation")->register_module("1", QLinear(c.adaln, c.dim, true));
  final_linear_ = final_layer->register_module("linear", QLinear(c.dim, patch_features, true));
}

at::Tensor ZImageTransformerImpl::run_block(const Block& b, at::Tensor x, const std::pair<at::Tensor, at::Tensor>& pe,
                                            const at::Tensor& t_emb, int index) {
  const BlockScope staged(hooks_, index);
  const auto& c = config_;
  const int64_t L = x.size(1), H = c.heads, D = c.head_dim;
  at::Tensor scale_msa, gate_msa, scale_mlp, gate_mlp;
  if (b.modulated) {
    const auto mods = b.ada->forward(t_emb).unsqueeze(1).chunk(4, -1);  // [1, 1, dim] each
    scale_msa = 1 + mods[0], gate_msa = mods[1].tanh(), scale_mlp = 1 + mods[2], gate_mlp = mods[3].tanh();
  }
  auto modulate = [&](const at::Tensor& v, const at::Tensor& s) { return s.defined() ? v * s : v; };
  auto gated = [&](const at::Tensor& v, const at::Tensor& g) { return g.defined() ? v * g : v; };
  const auto h = modulate(rms_norm(x, b.attn_norm1, c.eps), scale_msa);
  const auto qkv = b.qkv->forward(h).view({1, L, 3, H, D}).permute({2, 0, 3, 1, 4});  // [3, 1, H, L, D]
  const auto q = flux_apply_rope(rms_norm(qkv[0], b.q_norm, c.eps), pe), k = flux_apply_rope(rms_norm(qkv[1], b.k_norm, c.eps), pe);
  const auto a = attention(q, k, qkv[2], 1.0 / std::sqrt(static_cast<double>(D)));
  x = x + gated(rms_norm(b.out->forward(a.transpose(1, 2).reshape({1, L, H * D})), b.attn_norm2, c.eps), gate_msa);
  const auto f = modulate(rms_norm(x, b.ffn_norm1, c.eps), scale_mlp);
  return x + gated(rms_norm(b.w2->forward(at::silu(b.w1->forward(f)) * b.w3->forward(f)), b.ffn_norm2, c.eps), gate_mlp);
}

at::Tensor ZImageTransformerImpl::item(const at::Tensor& x, const at::Tensor& t_emb, const at::Tensor& cap_in,
                                       at::ScalarType compute) {
  const auto& c = config_;
  const at::Device device = x_pad_.device();
  const int64_t C = c.channels, Hh = x.size(1) / 2, Wh = x.size(2) / 2, N = Hh * Wh, Np = padded(N);
  const int64_t Lc = cap_in.size(0), Lp = padded(Lc);
  // caption: embedded, padded with its pad token; positions (1 + j, 0, 0)
  at::Tensor cap = cap_linear_->forward(rms_norm(cap_in.to(device).to(compute), cap_norm_, c.eps));
  if (Lp > Lc) cap = at::cat({cap, cap_pad_.to(compute).expand({Lp - Lc, c.dim})}, 0);
  auto cap_ids = at::zeros({Lp, 3}, at::kLong);
  cap_ids.select(1, 0).copy_(at::arange(1, Lp + 1, at::kLong));
  // image: 2x2 patches in row-major order, features (py·2 + px)·C + c; padded; positions (Lp + 1, i, j)
  const auto patches = x.view({C, Hh, 2, Wh, 2}).permute({1, 3, 2, 4, 0}).reshape({N, 4 * C});
  at::Tensor img = x_embedder_->forward(patches.to(device).to(compute));
  if (Np > N) img = at::cat({img, x_pad_.to(compute).expand({Np - N, c.dim})}, 0);
  auto img_ids = at::zeros({Np, 3}, at::kLong);
  img_ids.narrow(0, 0, N).select(1, 0).fill_(Lp + 1);
  img_ids.narrow(0, 0, N).select(1, 1).copy_(at::arange(Hh, at::kLong).repeat_interleave(Wh));
  img_ids.narrow(0, 0, N).select(1, 2).copy_(at::arange(Wh, at::kLong).repeat(Hh));
  auto pe_of = [&](const at::Tensor& ids) {
    auto pe = flux_rope(ids.unsqueeze(0).to(device), c.axes_dims, c.rope_theta);  // [1, 1, n, D/2]
    return pe;
  };
  const auto img_pe = pe_of(img_ids), cap_pe = pe_of(cap_ids);
  int index = 0;
  img = img.unsqueeze(0), cap = cap.unsqueeze(0);
  for (const auto& b : noise_refiner_) img = run_block(b, img, img_pe, t_emb, index++);
  for (const auto& b : context_refiner_) cap = run_block(b, cap, cap_pe, t_emb, index++);
  at::Tensor h = at::cat({img, cap}, 1);
  const std::pair<at::Tensor, at::Tensor> pe{at::cat({img_pe.first, cap_pe.first}, 2), at::cat({img_pe.second, cap_pe.second}, 2)};
  for (const auto& b : layers_) h = run_block(b, h, pe, t_emb, index++);
  // final layer on the image rows: LayerNorm (no affine, eps 1e-6) times 1 + scale
  const auto scale = 1 + final_ada_->forward(at::silu(t_emb)).unsqueeze(1);
  const auto normed = at::layer_norm(h.narrow(1, 0, N).to(at::kFloat), {c.dim}, {}, {}, 1e-6).to(compute);
  const auto y = final_linear_->forward(normed * scale).squeeze(0).to(at::kFloat).to(at::kCPU);  // [N, 4C]
  return y.view({Hh, Wh, 2, 2, C}).permute({4, 0, 2, 1, 3}).reshape({C, 2 * Hh, 2 * Wh});
}

at::Tensor ZImageTransformerImpl::forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& cap,
                                          const std::vector<int64_t>& cap_len, at::ScalarType compute) {
  const InferenceGuard guard;
  const auto& c = config_;
  if (x.dim() != 4 || x.size(1) != c.channels || x.size(2) % 2 != 0 || x.size(3) % 2 != 0) {
    throw InputError("Z-Image: the latent must be [B, " + std::to_string(c.channels) + ", H, W] with H and W even");
  }
  const int64_t B = x.size(0);
  if (t.numel() != B || cap.size(0) != B || static_cast<int64_t>(cap_len.size()) != B) {
    throw InputError("Z-Image: the latent, t, the captions and their lengths disagree on the batch size");
  }
  const at::Device device = x_pad_.device();
  const auto e = flux_timestep_embedding(t.reshape({-1}).to(at::kFloat) * (c.t_scale / 1000.0), 256).to(device).to(compute);
  const auto t_emb = t_mlp2_->forward(at::silu(t_mlp0_->forward(e)));  // [B, adaln]
  std::vector<at::Tensor> out;
  for (int64_t b = 0; b < B; ++b) {
    if (cap_len[b] < 1 || cap_len[b] > cap.size(1)) throw InputError("Z-Image: a caption length is outside 1.." + std::to_string(cap.size(1)));
    out.push_back(item(x[b].to(at::kFloat), t_emb.narrow(0, b, 1), cap[b].narrow(0, 0, cap_len[b]), compute));
  }
  return at::stack(out);
}

}  // namespace fp8s
