#include "families/zimage/qwen3.h"

#include <cmath>

#include "core/error.h"
#include "models/config_json.h"
#include "families/zimage/zimage_ops.h"

namespace fp8s {
namespace {

using zimage::rms_norm;

int64_t dim(const SafetensorsFile& f, const std::string& key, std::size_t d) {
  const auto* rec = f.find(key);
  if (!rec) throw InputError(f.path() + ": not a Qwen3 text encoder (no '" + key + "')");
  if (rec->shape.size() <= d) throw InputError(f.path() + ": tensor '" + key + "' has an unexpected shape");
  return rec->shape[d];
}


at::Tensor rotate_half(const at::Tensor& x) {
  const auto halves = x.chunk(2, -1);
  return at::cat({-halves[1], halves[0]}, -1);
}

}  // namespace

Qwen3Config qwen3_config(const SafetensorsFile& f, const std::string& p) {
  Qwen3Config c;
  // the tiny files' own metadata, else a model folder's config.json (the same names)
  auto meta = f.metadata().find("qwen3.config");
  if (meta == f.metadata().end()) meta = f.metadata().find("config.json");
  if (meta != f.metadata().end()) {
    read_config_json(meta->second, f.path(), meta->first.c_str(), [&](const nlohmann::json& j) {
      c.eps = j.value("rms_norm_eps", c.eps);
      c.rope_theta = j.value("rope_theta", c.rope_theta);
    });
    check_config_value(c.eps, 1e-12, 0.1, f.path(), meta->first + " rms_norm_eps");
    check_config_value(c.rope_theta, 1, 1e9, f.path(), meta->first + " rope_theta");
  }
  c.vocab_size = static_cast<int>(dim(f, p + "embed_tokens.weight", 0));
  c.hidden = static_cast<int>(dim(f, p + "embed_tokens.weight", 1));
  const std::string l0 = p + "layers.0.";
  c.head_dim = static_cast<int>(dim(f, l0 + "self_attn.q_norm.weight", 0));
  check_config_value(c.head_dim, 2, 4096, f.path(), "the text encoder's head width (q_norm)");
  c.heads = static_cast<int>(dim(f, l0 + "self_attn.q_proj.weight", 0) / c.head_dim);
  c.kv_heads = static_cast<int>(dim(f, l0 + "self_attn.k_proj.weight", 0) / c.head_dim);
  c.intermediate = static_cast<int>(dim(f, l0 + "mlp.gate_proj.weight", 0));
  c.layers = 0;
  while (f.find(p + "layers." + std::to_string(c.layers) + ".self_attn.q_proj.weight")) ++c.layers;
  if (c.layers < 2 || c.head_dim % 2 != 0 || c.kv_heads <= 0 || c.heads % c.kv_heads != 0) {
    throw InputError(f.path() + ": a Qwen3 text encoder needs at least 2 layers and whole groups of query heads per key/value head");
  }
  return c;
}

Qwen3EncoderImpl::Qwen3EncoderImpl(const Qwen3Config& c) : config_(c) {
  const int64_t d = c.hidden, hd = c.head_dim, q_out = int64_t(c.heads) * hd, kv_out = int64_t(c.kv_heads) * hd;
  embed_ = register_module("embed_tokens", Embedding(c.vocab_size, d));
  auto layers = container(*this, "layers");
  for (int i = 0; i + 1 < c.layers; ++i) {  // hidden_states[-2]: the last layer is never run
    auto l = container(*layers, std::to_string(i));
    auto attn = container(*l, "self_attn");
    auto mlp = container(*l, "mlp");
    Layer layer;
    layer.input_norm = container(*l, "input_layernorm")->register_parameter("weight", placeholder({d}), false);
    layer.post_norm = container(*l, "post_attention_layernorm")->register_parameter("weight", placeholder({d}), false);
    layer.q = attn->register_module("q_proj", QLinear(d, q_out, false));
    layer.k = attn->register_module("k_proj", QLinear(d, kv_out, false));
    layer.v = attn->register_module("v_proj", QLinear(d, kv_out, false));
    layer.o = attn->register_module("o_proj", QLinear(q_out, d, false));
    layer.q_norm = container(*attn, "q_norm")->register_parameter("weight", placeholder({hd}), false);
    layer.k_norm = container(*attn, "k_norm")->register_parameter("weight", placeholder({hd}), false);
    layer.gate = mlp->register_module("gate_proj", QLinear(d, c.intermediate, false));
    layer.up = mlp->register_module("up_proj", QLinear(d, c.intermediate, false));
    layer.down = mlp->register_module("down_proj", QLinear(c.intermediate, d, false));
    layers_.push_back(layer);
    network_blocks_.push_back({"layers." + std::to_string(i), l, 1.0});
  }
}

std::vector<std::string> Qwen3EncoderImpl::ignorable_keys(const Qwen3Config& config) {
  const std::string last = "layers." + std::to_string(config.layers - 1) + ".";
  std::vector<std::string> keys{"norm.weight"};
  for (const char* k : {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                        "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                        "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                        "mlp.down_proj.weight"}) {
    keys.push_back(last + k);
  }
  return keys;
}

at::Tensor Qwen3EncoderImpl::forward(const at::Tensor& tokens, const at::Tensor& mask, at::ScalarType compute) {
  const InferenceGuard guard;
  const auto& c = config_;
  const int64_t B = tokens.size(0), L = tokens.size(1), H = c.heads, KV = c.kv_heads, hd = c.head_dim;
  const at::Device device = embed_->weight.device();
  at::Tensor h = embed_->forward(tokens.to(device)).to(compute);
  // RoPE (rotate-half): inv_freq = θ^(−2i/hd) in FP32, positions 0..L−1
  const auto inv_freq = 1.0 / at::pow(at::full({}, c.rope_theta, at::kDouble),
                                      at::arange(0, hd, 2, at::kDouble) / static_cast<double>(hd));
  const auto freqs = at::outer(at::arange(L, at::kFloat), inv_freq.to(at::kFloat));
  const auto emb = at::cat({freqs, freqs}, -1);
  const auto cos = emb.cos().to(device).to(compute), sin = emb.sin().to(device).to(compute);
  // causal, and padded keys masked for every query: an additive [B, 1, L, L] bias
  at::Tensor allowed = at::ones({L, L}, at::kBool).tril().unsqueeze(0);
  if (mask.defined()) allowed = allowed & mask.to(at::kBool).unsqueeze(1);
  const auto bias = at::zeros({B, 1, L, L}, at::kFloat)
                        .masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity())
                        .to(device)
                        .to(compute);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const BlockScope staged(hooks_, static_cast<int>(i));
    const Layer& l = layers_[i];
    const auto x = rms_norm(h, l.input_norm, c.eps);
    auto heads = [&](const QLinear& proj, const at::Tensor& norm, int64_t n) {
      return rms_norm(proj->forward(x).view({B, L, n, hd}), norm, c.eps).transpose(1, 2);
    };
    auto q = heads(l.q, l.q_norm, H), k = heads(l.k, l.k_norm, KV);
    const auto v = l.v->forward(x).view({B, L, KV, hd}).transpose(1, 2);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    const int64_t group = H / KV;  // query head j reads key/value head j / group
    const auto a = attention(q, group > 1 ? k.repeat_interleave(group, 1) : k, group > 1 ? v.repeat_interleave(group, 1) : v,
                             scale, bias);
    h = h + l.o->forward(a.transpose(1, 2).reshape({B, L, H * hd}));
    const auto m = rms_norm(h, l.post_norm, c.eps);
    h = h + l.down->forward(at::silu(l.gate->forward(m)) * l.up->forward(m));
  }
  return h.to(at::kFloat);
}

}  // namespace fp8s
