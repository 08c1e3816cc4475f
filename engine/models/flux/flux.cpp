#include "models/flux/flux.h"

#include "models/config_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/op_profile.h"

namespace fp8s {

FluxConfig parse_flux_config(const std::string& json_text, bool guidance, const std::string& label) {
  FluxConfig c;
  c.guidance_embed = guidance;
  read_config_json(json_text, label, "flux.config", [&](const nlohmann::json& j) {
    read_int_fields(j, label, "flux.config", {{"hidden_size", &c.hidden_size}, {"num_heads", &c.num_heads}, {"depth", &c.depth},
                        {"depth_single_blocks", &c.depth_single_blocks}, {"in_channels", &c.in_channels},
                        {"vec_in_dim", &c.vec_in_dim}, {"context_in_dim", &c.context_in_dim}});
    c.axes_dim = config_int_list(j, "axes_dim", c.axes_dim, label, "flux.config axes_dim");
    c.theta = j.value("theta", c.theta);
    c.mlp_ratio = j.value("mlp_ratio", c.mlp_ratio);
  });
  check_config_value(c.theta, 1, 1e9, label, "flux.config theta");
  check_config_value(c.mlp_ratio, 0.25, 64, label, "flux.config mlp_ratio");
  check_rope_axes(c.axes_dim, label, "flux.config axes_dim");
  int axes = 0;
  for (int a : c.axes_dim) axes += a;
  if (c.hidden_size <= 0 || c.num_heads <= 0 || c.hidden_size % c.num_heads != 0 || axes != c.head_dim() ||
      c.axes_dim.size() != 3 || c.depth < 0 || c.depth_single_blocks < 0) {
    throw InputError(label + ": flux.config is inconsistent (hidden size, heads and axes_dim must agree)");
  }
  return c;
}

at::Tensor flux_fp16_clamp(const at::Tensor& x) {
  if (x.scalar_type() != at::kHalf) return x;
  return at::nan_to_num(x, 0.0, 65504.0, -65504.0);
}

at::Tensor flux_apply_rope(const at::Tensor& x, const std::pair<at::Tensor, at::Tensor>& pe) {
  auto sizes = x.sizes().vec();
  sizes.back() /= 2;
  sizes.push_back(2);
  const auto p = x.to(at::kFloat).reshape(sizes);
  const auto x0 = p.select(-1, 0), x1 = p.select(-1, 1);
  const auto& [c, s] = pe;
  return at::stack({c * x0 - s * x1, s * x0 + c * x1}, -1).reshape(x.sizes()).to(x.scalar_type());
}

at::Tensor flux_timestep_embedding(const at::Tensor& t_in, int64_t dim) {
  const auto t = t_in.to(at::kFloat) * 1000.0;
  const int64_t half = dim / 2;
  const auto freqs = at::exp(-std::log(10000.0) * at::arange(half, at::TensorOptions().dtype(at::kFloat).device(t.device())) / half);
  const auto args = t.unsqueeze(1) * freqs.unsqueeze(0);
  return at::cat({at::cos(args), at::sin(args)}, -1);
}

std::pair<at::Tensor, at::Tensor> flux_rope(const at::Tensor& ids, const std::vector<int>& axes_dim, double theta) {
  // angle = pos · θ^(-2i/dim) per axis, in FP64 as BFL computes it, the axes' frequencies concatenated
  std::vector<at::Tensor> angles;
  const auto pos = ids.to(at::kDouble);
  for (std::size_t a = 0; a < axes_dim.size(); ++a) {
    const int64_t dim = axes_dim[a];
    const auto scale = at::arange(0, dim, 2, at::TensorOptions().dtype(at::kDouble).device(ids.device())) / static_cast<double>(dim);
    const auto omega = 1.0 / at::pow(theta, scale);
    angles.push_back(pos.select(-1, static_cast<int64_t>(a)).unsqueeze(-1) * omega);
  }
  const auto angle = at::cat(angles, -1).unsqueeze(1);  // [B, 1, N, head_dim/2]
  return {at::cos(angle).to(at::kFloat), at::sin(angle).to(at::kFloat)};
}

namespace {

// BFL's RMSNorm (QKNorm), eps 1e-6 (models/nn.h).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& scale) { return fp8s::rms_norm(x, scale, 1e-6); }

// LayerNorm(elementwise_affine=False, eps=1e-6), in FP32.
at::Tensor plain_layer_norm(const at::Tensor& x) {
  const OpTimer timer(OpKind::Norm);
  return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, {}, {}, 1e-6).to(x.scalar_type());
}

// [B, L, 3·H·D] -> q, k, v [B, H, L, D]
std::vector<at::Tensor> split_heads(const at::Tensor& qkv, int64_t heads) {
  const int64_t B = qkv.size(0), L = qkv.size(1), D = qkv.size(2) / (3 * heads);
  auto t = qkv.reshape({B, L, 3, heads, D}).permute({2, 0, 3, 1, 4});
  return {t[0], t[1], t[2]};
}

at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  return (1 + scale) * x + shift;
}

}  // namespace

void flux_qk_norm(torch::nn::Module& parent, int64_t head_dim, at::Tensor& q, at::Tensor& k) {
  auto norm = container(parent, "norm");
  q = container(*norm, "query_norm")->register_parameter("scale", placeholder({head_dim}), false);
  k = container(*norm, "key_norm")->register_parameter("scale", placeholder({head_dim}), false);
}

FluxImpl::Embedder FluxImpl::embedder(const std::string& name, int64_t in) {
  auto m = container(*this, name);
  const int64_t h = config_.hidden_size;
  return {m->register_module("in_layer", QLinear(in, h)), m->register_module("out_layer", QLinear(h, h))};
}

FluxImpl::Stream FluxImpl::stream(torch::nn::Module& block, const std::string& p) {
  const int64_t h = config_.hidden_size, mlp = config_.mlp_hidden(), d = config_.head_dim();
  Stream s;
  s.mod = container(block, p + "_mod")->register_module("lin", QLinear(h, 6 * h));
  auto attn = container(block, p + "_attn");
  s.qkv = attn->register_module("qkv", QLinear(h, 3 * h));
  s.proj = attn->register_module("proj", QLinear(h, h));
  flux_qk_norm(*attn, d, s.q_norm, s.k_norm);
  auto m = container(block, p + "_mlp");
  s.mlp0 = m->register_module("0", QLinear(h, mlp));
  s.mlp2 = m->register_module("2", QLinear(mlp, h));
  return s;
}

FluxImpl::FluxImpl(const FluxConfig& c) : config_(c) {
  const int64_t h = c.hidden_size, mlp = c.mlp_hidden(), d = c.head_dim();
  img_in_ = register_module("img_in", QLinear(c.in_channels, h));
  time_in_ = embedder("time_in", 256);
  vector_in_ = embedder("vector_in", c.vec_in_dim);
  if (c.guidance_embed) guidance_in_ = embedder("guidance_in", 256);
  txt_in_ = register_module("txt_in", QLinear(c.context_in_dim, h));
  add_blocks("double_blocks", c.depth, [&](torch::nn::Module& b) {
    auto img = stream(b, "img");
    double_.emplace_back(img, stream(b, "txt"));
  });
  add_blocks("single_blocks", c.depth_single_blocks, [&](torch::nn::Module& b) {
    Single s;
    s.linear1 = b.register_module("linear1", QLinear(h, 3 * h + mlp));
    s.linear2 = b.register_module("linear2", QLinear(h + mlp, h));
    flux_qk_norm(b, d, s.q_norm, s.k_norm);
    s.mod = container(b, "modulation")->register_module("lin", QLinear(h, 3 * h));
    single_.push_back(s);
  });
  auto last = container(*this, "final_layer");
  final_linear_ = last->register_module("linear", QLinear(h, c.in_channels));
  final_mod_ = container(*last, "adaLN_modulation")->register_module("1", QLinear(h, 2 * h));
}

at::Tensor FluxImpl::forward(const at::Tensor& img_in, const at::Tensor& img_ids, const at::Tensor& txt_in,
                             const at::Tensor& txt_ids, const at::Tensor& t, const at::Tensor& y,
                             const at::Tensor& guidance, at::ScalarType compute) {
  const InferenceGuard guard;
  const auto& c = config_;
  const auto device = img_in_->store.weight.device();
  const int64_t heads = c.num_heads, h = c.hidden_size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim()));
  auto mlp_embed = [&](const Embedder& e, const at::Tensor& x) { return e.out->forward(at::silu(e.in->forward(x))); };
  at::Tensor img = img_in_->forward(img_in.to(device, compute));
  at::Tensor vec = mlp_embed(time_in_, flux_timestep_embedding(t.to(device), 256).to(compute));
  if (c.guidance_embed) {
    if (!guidance.defined()) throw InputError("Flux dev needs a guidance value");
    vec = vec + mlp_embed(guidance_in_, flux_timestep_embedding(guidance.to(device), 256).to(compute));
  }
  vec = vec + mlp_embed(vector_in_, y.to(device, compute));
  at::Tensor txt = txt_in_->forward(txt_in.to(device, compute));
  const int64_t L = txt.size(1);
  const auto pe = flux_rope(at::cat({txt_ids, img_ids}, 1).to(device), c.axes_dim, c.theta);
  const auto silu_vec = at::silu(vec);
  auto attend = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const auto a = attention(flux_apply_rope(q, pe), flux_apply_rope(k, pe), v, scale);  // [B, H, N, D]
    return a.transpose(1, 2).flatten(2);
  };
  int block = 0;
  for (const auto& [is, ts] : double_) {
    const BlockScope staged(hooks_, block++);
    const auto im = is.mod->forward(silu_vec).unsqueeze(1).chunk(6, -1);  // shift, scale, gate (×2)
    const auto tm = ts.mod->forward(silu_vec).unsqueeze(1).chunk(6, -1);
    auto iq = split_heads(is.qkv->forward(modulate(plain_layer_norm(img), im[0], im[1])), heads);
    auto tq = split_heads(ts.qkv->forward(modulate(plain_layer_norm(txt), tm[0], tm[1])), heads);
    const auto q = at::cat({rms_norm(tq[0], ts.q_norm), rms_norm(iq[0], is.q_norm)}, 2);
    const auto k = at::cat({rms_norm(tq[1], ts.k_norm), rms_norm(iq[1], is.k_norm)}, 2);
    const auto v = at::cat({tq[2], iq[2]}, 2);
    const auto a = attend(q, k, v);
    img = img + im[2] * is.proj->forward(a.slice(1, L));
    img = img + im[5] * is.mlp2->forward(at::gelu(is.mlp0->forward(modulate(plain_layer_norm(img), im[3], im[4])), "tanh"));
    txt = txt + tm[2] * ts.proj->forward(a.slice(1, 0, L));
    txt = flux_fp16_clamp(txt + tm[5] * ts.mlp2->forward(at::gelu(ts.mlp0->forward(modulate(plain_layer_norm(txt), tm[3], tm[4])), "tanh")));
  }
  at::Tensor x = at::cat({txt, img}, 1);
  for (const auto& s : single_) {
    const BlockScope staged(hooks_, block++);
    const auto m = s.mod->forward(silu_vec).unsqueeze(1).chunk(3, -1);
    const auto both = s.linear1->forward(modulate(plain_layer_norm(x), m[0], m[1]));
    const auto qkv = split_heads(both.slice(-1, 0, 3 * h), heads);
    const auto a = attend(rms_norm(qkv[0], s.q_norm), rms_norm(qkv[1], s.k_norm), qkv[2]);
    x = flux_fp16_clamp(x + m[2] * s.linear2->forward(at::cat({a, at::gelu(both.slice(-1, 3 * h), "tanh")}, -1)));
  }
  img = x.slice(1, L);
  const auto fm = final_mod_->forward(silu_vec).chunk(2, 1);  // shift, scale
  img = modulate(plain_layer_norm(img), fm[0].unsqueeze(1), fm[1].unsqueeze(1));
  return final_linear_->forward(img).to(at::kFloat);
}

}  // namespace fp8s
