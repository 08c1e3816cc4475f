#include "models/t5/t5.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/config_json.h"
#include "models/op_profile.h"

namespace fp8s {

T5Config parse_t5_config(const std::string& json_text, const std::string& label) {
  T5Config c;
  read_config_json(json_text, label, "t5.config", [&](const nlohmann::json& j) {
    read_int_fields(j, label, "t5.config", {{"d_model", &c.d_model}, {"d_kv", &c.d_kv}, {"num_heads", &c.num_heads}, {"d_ff", &c.d_ff},
                        {"num_layers", &c.num_layers}, {"vocab_size", &c.vocab_size},
                        {"relative_attention_num_buckets", &c.buckets},
                        {"relative_attention_max_distance", &c.max_distance}});
  });
  check_config_value(c.max_distance, 1, 1 << 20, label, "t5.config relative_attention_max_distance");
  check_config_value(c.buckets, 4, 4096, label, "t5.config relative_attention_num_buckets");
  if (c.d_model <= 0 || c.d_kv <= 0 || c.num_heads <= 0 || c.d_ff <= 0 || c.num_layers <= 0 || c.buckets < 4) {
    throw InputError(label + ": t5.config has a size that is not positive");
  }
  return c;
}

namespace {
// HF T5LayerNorm: the weight applied in FP32 (models/nn.h).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) { return fp8s::rms_norm(x, w, 1e-6, true); }
}  // namespace

T5EncoderImpl::T5EncoderImpl(const T5Config& c) : config_(c) {
  const int64_t d = c.d_model, inner = static_cast<int64_t>(c.num_heads) * c.d_kv;
  shared_ = register_module("shared", Embedding(c.vocab_size, d));
  auto encoder = container(*this, "encoder");
  auto block = container(*encoder, "block");
  for (int i = 0; i < c.num_layers; ++i) {
    auto b = container(*block, std::to_string(i));
    auto layer = container(*b, "layer");
    auto l0 = container(*layer, "0"), l1 = container(*layer, "1");
    auto attn = container(*l0, "SelfAttention");
    auto ff = container(*l1, "DenseReluDense");
    Block blk;
    blk.q = attn->register_module("q", QLinear(d, inner, false));
    blk.k = attn->register_module("k", QLinear(d, inner, false));
    blk.v = attn->register_module("v", QLinear(d, inner, false));
    blk.o = attn->register_module("o", QLinear(inner, d, false));
    if (i == 0) relative_bias_ = attn->register_module("relative_attention_bias", Embedding(c.buckets, c.num_heads));
    blk.ln1 = container(*l0, "layer_norm")->register_parameter("weight", placeholder({d}), false);
    blk.wi0 = ff->register_module("wi_0", QLinear(d, c.d_ff, false));
    blk.wi1 = ff->register_module("wi_1", QLinear(d, c.d_ff, false));
    blk.wo = ff->register_module("wo", QLinear(c.d_ff, d, false));
    blk.ln2 = container(*l1, "layer_norm")->register_parameter("weight", placeholder({d}), false);
    blocks_.push_back(blk);
    network_blocks_.push_back({"encoder.block." + std::to_string(i), b, 1.0});
  }
  final_ln_ = container(*encoder, "final_layer_norm")->register_parameter("weight", placeholder({d}), false);
}

at::Tensor T5EncoderImpl::relative_buckets(int64_t length, int buckets, int max_distance) {
  const auto pos = at::arange(length, at::kLong);
  const auto rel = pos.unsqueeze(0) - pos.unsqueeze(1);  // key - query
  const int64_t half = buckets / 2, exact = half / 2;
  auto out = (rel > 0).to(at::kLong) * half;
  const auto a = rel.abs();
  auto large = exact + (at::log(a.to(at::kFloat) / exact) / std::log(static_cast<double>(max_distance) / exact) *
                        static_cast<double>(half - exact))
                           .to(at::kLong);
  large = at::clamp_max(large, half - 1);
  return out + at::where(a < exact, a, large);
}

at::Tensor T5EncoderImpl::forward(const at::Tensor& tokens, at::ScalarType compute) {
  const InferenceGuard guard;
  const auto& c = config_;
  const int64_t B = tokens.size(0), L = tokens.size(1), H = c.num_heads, dk = c.d_kv;
  at::Tensor h = shared_->forward(tokens.to(shared_->weight.device())).to(compute);
  // [1, H, L, L]: the bias the first layer computes and every layer adds to its scores
  const auto buckets = relative_buckets(L, c.buckets, c.max_distance).to(h.device());
  const auto bias = at::embedding(relative_bias_->weight, buckets).permute({2, 0, 1}).unsqueeze(0).to(compute);
  auto heads = [&](const at::Tensor& x) { return x.view({B, L, H, dk}).transpose(1, 2); };
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const BlockScope staged(hooks_, static_cast<int>(i));
    const Block& b = blocks_[i];
    const auto n = rms_norm(h, b.ln1);
    const auto a = attention(heads(b.q->forward(n)), heads(b.k->forward(n)), heads(b.v->forward(n)), 1.0, bias);
    h = h + b.o->forward(a.transpose(1, 2).reshape({B, L, H * dk}));
    const auto m = rms_norm(h, b.ln2);
    h = h + b.wo->forward(at::gelu(b.wi0->forward(m), "tanh") * b.wi1->forward(m));
  }
  return rms_norm(h, final_ln_).to(at::kFloat);
}

}  // namespace fp8s
