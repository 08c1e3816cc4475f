#include "models/lm/decoder_lm.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/config_json.h"

namespace fp8s {
namespace {


at::Tensor rotate_half(const at::Tensor& x) {
  const auto halves = x.chunk(2, -1);
  return at::cat({-halves[1], halves[0]}, -1);
}

const char* const kLayerKeys[] = {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                                  "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                  "self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.q_proj.bias",
                                  "self_attn.k_proj.bias", "self_attn.v_proj.bias", "mlp.gate_proj.weight",
                                  "mlp.up_proj.weight", "mlp.down_proj.weight"};

}  // namespace

std::vector<int> DecoderLmConfig::output_layers() const { return outputs.empty() ? std::vector<int>{layers - 1} : outputs; }

int DecoderLmConfig::layers_run() const {
  const auto o = output_layers();
  return std::min(layers, *std::max_element(o.begin(), o.end()));
}

bool DecoderLmConfig::final_norm() const {
  const auto o = output_layers();
  return normed_last && std::find(o.begin(), o.end(), layers) != o.end();
}

DecoderLmConfig decoder_lm_config(const SafetensorsFile& f, const std::string& p, const DecoderLmConfig& base,
                                  const std::string& metadata_key) {
  DecoderLmConfig c = base;
  auto shape = [&](const std::string& key, std::size_t d) { return static_cast<int>(tensor_dim(f, key, d, "a " + c.name + " text encoder")); };
  // the tiny files' own metadata, else a model folder's config.json (the same names)
  auto meta = f.metadata().find(metadata_key);
  if (meta == f.metadata().end()) meta = f.metadata().find("config.json");
  if (meta != f.metadata().end()) {
    read_config_json(meta->second, f.path(), meta->first.c_str(), [&](const nlohmann::json& j) {
      c.eps = j.value("rms_norm_eps", c.eps);
      c.rope_theta = j.value("rope_theta", c.rope_theta);
      // a model without q/k norms has no shape that tells its head width
      if (j.contains("head_dim")) c.head_dim = config_int(j["head_dim"], f.path(), meta->first + " head_dim");
    });
    check_config_value(c.eps, 1e-12, 0.1, f.path(), meta->first + " rms_norm_eps");
    check_config_value(c.rope_theta, 1, 1e10, f.path(), meta->first + " rope_theta");
  }
  c.vocab_size = shape(p + "embed_tokens.weight", 0);
  c.hidden = shape(p + "embed_tokens.weight", 1);
  const std::string l0 = p + "layers.0.";
  c.qk_norm = f.find(l0 + "self_attn.q_norm.weight") != nullptr;
  c.qkv_bias = f.find(l0 + "self_attn.q_proj.bias") != nullptr;
  if (c.qk_norm) c.head_dim = shape(l0 + "self_attn.q_norm.weight", 0);
  check_config_value(c.head_dim, 2, 4096, f.path(), "the text encoder's head width");
  c.heads = static_cast<int>(shape(l0 + "self_attn.q_proj.weight", 0) / c.head_dim);
  c.kv_heads = static_cast<int>(shape(l0 + "self_attn.k_proj.weight", 0) / c.head_dim);
  c.intermediate = shape(l0 + "mlp.gate_proj.weight", 0);
  c.layers = 0;
  while (c.layers < 10000 && f.find(p + "layers." + std::to_string(c.layers) + ".self_attn.q_proj.weight")) ++c.layers;
  if (c.layers < 2 || c.head_dim % 2 != 0 || c.heads <= 0 || c.kv_heads <= 0 || c.heads % c.kv_heads != 0) {
    throw InputError(f.path() + ": a " + c.name +
                     " text encoder needs at least 2 layers and whole groups of query heads per key/value head");
  }
  for (int o : c.output_layers()) {
    if (o < 0 || o > c.layers) {
      throw InputError(f.path() + ": the " + c.name + " text encoder has " + std::to_string(c.layers) +
                       " layers; its hidden state " + std::to_string(o) + " is needed (a pruned or wrong file?)");
    }
  }
  return c;
}

DecoderLmImpl::DecoderLmImpl(const DecoderLmConfig& c) : config_(c) {
  const int64_t d = c.hidden, hd = c.head_dim, q_out = int64_t(c.heads) * hd, kv_out = int64_t(c.kv_heads) * hd;
  embed_ = register_module("embed_tokens", Embedding(c.vocab_size, d));
  auto layers = container(*this, "layers");
  for (int i = 0; i < c.layers_run(); ++i) {  // the layers after the last output read are never run
    auto l = container(*layers, std::to_string(i));
    auto attn = container(*l, "self_attn");
    auto mlp = container(*l, "mlp");
    Layer layer;
    layer.input_norm = container(*l, "input_layernorm")->register_parameter("weight", placeholder({d}), false);
    layer.post_norm = container(*l, "post_attention_layernorm")->register_parameter("weight", placeholder({d}), false);
    layer.q = attn->register_module("q_proj", QLinear(d, q_out, c.qkv_bias));
    layer.k = attn->register_module("k_proj", QLinear(d, kv_out, c.qkv_bias));
    layer.v = attn->register_module("v_proj", QLinear(d, kv_out, c.qkv_bias));
    layer.o = attn->register_module("o_proj", QLinear(q_out, d, false));
    if (c.qk_norm) {
      layer.q_norm = container(*attn, "q_norm")->register_parameter("weight", placeholder({hd}), false);
      layer.k_norm = container(*attn, "k_norm")->register_parameter("weight", placeholder({hd}), false);
    }
    layer.gate = mlp->register_module("gate_proj", QLinear(d, c.intermediate, false));
    layer.up = mlp->register_module("up_proj", QLinear(d, c.intermediate, false));
    layer.down = mlp->register_module("down_proj", QLinear(c.intermediate, d, false));
    layers_.push_back(layer);
    network_blocks_.push_back({"layers." + std::to_string(i), l, 1.0});
  }
  if (c.final_norm()) norm_ = container(*this, "norm")->register_parameter("weight", placeholder({d}), false);
}

std::vector<std::string> DecoderLmImpl::ignorable_keys(const DecoderLmConfig& config) {
  std::vector<std::string> keys{"lm_head.weight"};
  if (!config.final_norm()) keys.push_back("norm.weight");
  for (int i = config.layers_run(); i < config.layers; ++i) {
    for (const char* k : kLayerKeys) keys.push_back("layers." + std::to_string(i) + "." + k);
  }
  return keys;
}

at::Tensor DecoderLmImpl::forward(const at::Tensor& tokens, const at::Tensor& mask, at::ScalarType compute) {
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
  // causal, and padded keys masked for every query: an additive [B, 1, L, L] bias. A query that sees
  // no key (left padding: a pad row before the first token) gets 0, as torch's SDPA gives it.
  at::Tensor allowed = at::ones({L, L}, at::kBool).tril().unsqueeze(0);
  if (mask.defined()) allowed = allowed & mask.to(at::kBool).unsqueeze(1);
  const auto sees = allowed.any(-1).view({allowed.size(0), 1, L, 1}).to(device);
  const bool blind_rows = !sees.all().item<bool>();
  const auto bias = at::zeros({B, 1, L, L}, at::kFloat)
                        .masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity())
                        .to(device)
                        .to(compute);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto wanted = c.output_layers();
  std::vector<at::Tensor> states(wanted.size());
  auto keep = [&](int index, const at::Tensor& state) {
    for (std::size_t j = 0; j < wanted.size(); ++j) {
      if (wanted[j] == index) states[j] = state;
    }
  };
  keep(0, h);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const BlockScope staged(hooks_, static_cast<int>(i));
    const Layer& l = layers_[i];
    const auto x = rms_norm(h, l.input_norm, c.eps);
    auto heads = [&](const QLinear& proj, const at::Tensor& norm, int64_t n) {
      const auto y = proj->forward(x).view({B, L, n, hd});
      return (norm.defined() ? rms_norm(y, norm, c.eps) : y).transpose(1, 2);
    };
    auto q = heads(l.q, l.q_norm, H), k = heads(l.k, l.k_norm, KV);
    const auto v = l.v->forward(x).view({B, L, KV, hd}).transpose(1, 2);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    const int64_t group = H / KV;  // query head j reads key/value head j / group
    auto a = attention(q, group > 1 ? k.repeat_interleave(group, 1) : k, group > 1 ? v.repeat_interleave(group, 1) : v,
                       scale, bias);
    if (blind_rows) a = at::where(sees, a, at::zeros_like(a));
    h = h + l.o->forward(a.transpose(1, 2).reshape({B, L, H * hd}));
    const auto m = rms_norm(h, l.post_norm, c.eps);
    h = h + l.down->forward(at::silu(l.gate->forward(m)) * l.up->forward(m));
    const int index = static_cast<int>(i) + 1;
    keep(index, index == c.layers && norm_.defined() ? rms_norm(h, norm_, c.eps) : h);
  }
  if (states.size() == 1) return states[0].to(at::kFloat);
  return at::cat(states, -1).to(at::kFloat);
}

}  // namespace fp8s
