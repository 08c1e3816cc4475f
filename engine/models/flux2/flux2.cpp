#include "models/flux2/flux2.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/config_json.h"
#include "models/flux/flux.h"
#include "models/op_profile.h"

namespace fp8s {
namespace {


int count_blocks(const SafetensorsFile& f, const std::string& prefix) {
  int n = 0;
  while (n < 10000 && f.find(prefix + std::to_string(n) + ".norm.query_norm.scale")) ++n;
  if (n == 0) {  // double blocks name their norms per stream
    while (n < 10000 && f.find(prefix + std::to_string(n) + ".img_attn.norm.query_norm.scale")) ++n;
  }
  return n;
}

// LayerNorm(elementwise_affine=False), in FP32.
at::Tensor plain_layer_norm(const at::Tensor& x, double eps) {
  const OpTimer timer(OpKind::Norm);
  return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, {}, {}, eps).to(x.scalar_type());
}

// [B, L, 3·H·D] -> q, k, v [B, H, L, D] (rows q | k | v, each head-major)
std::vector<at::Tensor> split_heads(const at::Tensor& qkv, int64_t heads) {
  const int64_t B = qkv.size(0), L = qkv.size(1), D = qkv.size(2) / (3 * heads);
  auto t = qkv.reshape({B, L, 3, heads, D}).permute({2, 0, 3, 1, 4});
  return {t[0], t[1], t[2]};
}

at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) { return (1 + scale) * x + shift; }

// SwiGLU: SiLU of the first half times the second.
at::Tensor swiglu(const at::Tensor& x) {
  const auto halves = x.chunk(2, -1);
  return at::silu(halves[0]) * halves[1];
}

}  // namespace

Flux2Config flux2_config(const SafetensorsFile& f, const std::string& p) {
  auto shape = [&](const std::string& key, std::size_t d) { return static_cast<int>(tensor_dim(f, key, d, "a FLUX.2 transformer")); };
  Flux2Config c;
  c.hidden_size = shape(p + "img_in.weight", 0);
  c.in_channels = shape(p + "img_in.weight", 1);
  c.context_in_dim = shape(p + "txt_in.weight", 1);
  const int head_dim = shape(p + "single_blocks.0.norm.query_norm.scale", 0);
  check_config_value(head_dim, 2, 4096, f.path(), "the transformer's head width (query_norm.scale)");
  c.num_heads = c.hidden_size / head_dim;
  c.depth = count_blocks(f, p + "double_blocks.");
  c.depth_single_blocks = count_blocks(f, p + "single_blocks.");
  c.guidance_embed = f.find(p + "guidance_in.in_layer.weight") != nullptr;
  c.mlp_ratio = static_cast<double>(shape(p + "single_blocks.0.linear2.weight", 1) - c.hidden_size) / c.hidden_size;
  const auto meta = f.metadata().find("flux2.config");
  if (meta != f.metadata().end()) {
    read_config_json(meta->second, f.path(), "flux2.config", [&](const nlohmann::json& j) {
      read_int_fields(j, f.path(), "flux2.config", {{"num_heads", &c.num_heads}});
      c.axes_dim = config_int_list(j, "axes_dim", c.axes_dim, f.path(), "flux2.config axes_dim");
      c.theta = j.value("theta", c.theta);
      c.eps = j.value("eps", c.eps);
    });
  } else if (const auto folder = f.metadata().find("config.json"); folder != f.metadata().end()) {
    // a diffusers folder's transformer/config.json (Flux2Transformer2DModel's names)
    read_config_json(folder->second, f.path(), "config.json", [&](const nlohmann::json& j) {
      read_int_fields(j, f.path(), "config.json", {{"num_attention_heads", &c.num_heads}});
      c.axes_dim = config_int_list(j, "axes_dims_rope", c.axes_dim, f.path(), "config.json axes_dims_rope");
      c.theta = j.value("rope_theta", c.theta);
      c.eps = j.value("eps", c.eps);
    });
  }
  check_config_value(c.theta, 1, 1e9, f.path(), "flux2.config theta");
  check_config_value(c.eps, 1e-12, 0.1, f.path(), "flux2.config eps");
  check_config_value(c.mlp_ratio, 0.25, 64, f.path(), "the transformer's MLP ratio");
  check_rope_axes(c.axes_dim, f.path(), "flux2.config axes_dim");
  int axes = 0;
  for (int a : c.axes_dim) axes += a;
  if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0 || axes != c.head_dim() || c.depth_single_blocks < 1) {
    throw InputError(f.path() + ": the FLUX.2 transformer's width, heads and RoPE axes do not agree (a damaged file?)");
  }
  return c;
}

Flux2Impl::Stream Flux2Impl::stream(torch::nn::Module& block, const std::string& p) {
  const int64_t h = config_.hidden_size, mlp = config_.mlp_hidden(), d = config_.head_dim();
  Stream s;
  auto attn = container(block, p + "_attn");
  s.qkv = attn->register_module("qkv", QLinear(h, 3 * h, false));
  s.proj = attn->register_module("proj", QLinear(h, h, false));
  flux_qk_norm(*attn, d, s.q_norm, s.k_norm);
  auto m = container(block, p + "_mlp");
  s.mlp0 = m->register_module("0", QLinear(h, 2 * mlp, false));
  s.mlp2 = m->register_module("2", QLinear(mlp, h, false));
  return s;
}

Flux2Impl::Flux2Impl(const Flux2Config& c) : config_(c) {
  const int64_t h = c.hidden_size, mlp = c.mlp_hidden(), d = c.head_dim();
  img_in_ = register_module("img_in", QLinear(c.in_channels, h, false));
  txt_in_ = register_module("txt_in", QLinear(c.context_in_dim, h, false));
  auto embedder = [&](const char* name, QLinear* out) {
    auto m = container(*this, name);
    out[0] = m->register_module("in_layer", QLinear(256, h, false));
    out[1] = m->register_module("out_layer", QLinear(h, h, false));
  };
  embedder("time_in", time_in_);
  if (c.guidance_embed) embedder("guidance_in", guidance_in_);
  mod_img_ = container(*this, "double_stream_modulation_img")->register_module("lin", QLinear(h, 6 * h, false));
  mod_txt_ = container(*this, "double_stream_modulation_txt")->register_module("lin", QLinear(h, 6 * h, false));
  mod_single_ = container(*this, "single_stream_modulation")->register_module("lin", QLinear(h, 3 * h, false));
  add_blocks("double_blocks", c.depth, [&](torch::nn::Module& b) {
    auto img = stream(b, "img");
    double_.emplace_back(img, stream(b, "txt"));
  });
  add_blocks("single_blocks", c.depth_single_blocks, [&](torch::nn::Module& b) {
    Single s;
    s.linear1 = b.register_module("linear1", QLinear(h, 3 * h + 2 * mlp, false));
    s.linear2 = b.register_module("linear2", QLinear(h + mlp, h, false));
    flux_qk_norm(b, d, s.q_norm, s.k_norm);
    single_.push_back(s);
  });
  auto last = container(*this, "final_layer");
  final_linear_ = last->register_module("linear", QLinear(h, c.in_channels, false));
  final_mod_ = container(*last, "adaLN_modulation")->register_module("1", QLinear(h, 2 * h, false));
}

at::Tensor Flux2Impl::forward(const at::Tensor& img_in, const at::Tensor& img_ids, const at::Tensor& txt_in,
                              const at::Tensor& txt_ids, const at::Tensor& t, const at::Tensor& guidance,
                              at::ScalarType compute) {
  const InferenceGuard guard;
  const auto& c = config_;
  const auto device = img_in_->store.weight.device();
  const int64_t heads = c.num_heads, h = c.hidden_size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim()));
  auto mlp_embed = [&](const QLinear* e, const at::Tensor& x) { return e[1]->forward(at::silu(e[0]->forward(x))); };
  at::Tensor img = img_in_->forward(img_in.to(device, compute));
  at::Tensor vec = mlp_embed(time_in_, flux_timestep_embedding(t.to(device), 256).to(compute));
  if (c.guidance_embed) {
    if (!guidance.defined()) throw InputError("FLUX.2 [dev] needs a guidance value (--guidance)");
    vec = vec + mlp_embed(guidance_in_, flux_timestep_embedding(guidance.to(device), 256).to(compute));
  }
  at::Tensor txt = txt_in_->forward(txt_in.to(device, compute));
  const int64_t L = txt.size(1);
  // text first, as BFL orders the joint sequence; one id list for the batch
  const auto ids = at::cat({txt_ids.to(device).to(at::kDouble), img_ids.to(device).to(at::kDouble)}, 0).unsqueeze(0);
  const auto pe = flux_rope(ids, c.axes_dim, c.theta);
  const auto silu_vec = at::silu(vec);
  auto rms = [&](const at::Tensor& x, const at::Tensor& w) { return rms_norm(x, w, c.eps); };
  auto attend = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const auto a = attention(flux_apply_rope(q, pe), flux_apply_rope(k, pe), v, scale);  // [B, H, N, D]
    return a.transpose(1, 2).flatten(2);
  };
  // one modulation per stream type drives every block
  const auto im = mod_img_->forward(silu_vec).unsqueeze(1).chunk(6, -1);  // shift, scale, gate (×2)
  const auto tm = mod_txt_->forward(silu_vec).unsqueeze(1).chunk(6, -1);
  const auto sm = mod_single_->forward(silu_vec).unsqueeze(1).chunk(3, -1);
  int block = 0;
  for (const auto& [is, ts] : double_) {
    const BlockScope staged(hooks_, block++);
    auto iq = split_heads(is.qkv->forward(modulate(plain_layer_norm(img, c.eps), im[0], im[1])), heads);
    auto tq = split_heads(ts.qkv->forward(modulate(plain_layer_norm(txt, c.eps), tm[0], tm[1])), heads);
    const auto q = at::cat({rms(tq[0], ts.q_norm), rms(iq[0], is.q_norm)}, 2);
    const auto k = at::cat({rms(tq[1], ts.k_norm), rms(iq[1], is.k_norm)}, 2);
    const auto v = at::cat({tq[2], iq[2]}, 2);
    const auto a = attend(q, k, v);
    img = img + im[2] * is.proj->forward(a.slice(1, L));
    img = img + im[5] * is.mlp2->forward(swiglu(is.mlp0->forward(modulate(plain_layer_norm(img, c.eps), im[3], im[4]))));
    txt = txt + tm[2] * ts.proj->forward(a.slice(1, 0, L));
    txt = flux_fp16_clamp(txt + tm[5] * ts.mlp2->forward(swiglu(ts.mlp0->forward(modulate(plain_layer_norm(txt, c.eps), tm[3], tm[4])))));
  }
  at::Tensor x = at::cat({txt, img}, 1);
  for (const auto& s : single_) {
    const BlockScope staged(hooks_, block++);
    const auto both = s.linear1->forward(modulate(plain_layer_norm(x, c.eps), sm[0], sm[1]));
    const auto qkv = split_heads(both.slice(-1, 0, 3 * h), heads);
    const auto a = attend(rms(qkv[0], s.q_norm), rms(qkv[1], s.k_norm), qkv[2]);
    x = flux_fp16_clamp(x + sm[2] * s.linear2->forward(at::cat({a, swiglu(both.slice(-1, 3 * h))}, -1)));
  }
  img = x.slice(1, L);
  const auto fm = final_mod_->forward(silu_vec).chunk(2, 1);  // shift, scale
  img = modulate(plain_layer_norm(img, c.eps), fm[0].unsqueeze(1), fm[1].unsqueeze(1));
  return final_linear_->forward(img).to(at::kFloat);
}

}  // namespace fp8s
