#include "models/text_encoder.h"

#include "core/cancel.h"

#include <limits>

namespace fp8s {

EmbeddingImpl::EmbeddingImpl(int64_t count, int64_t dim) {
  weight = register_parameter("weight", placeholder({count, dim}), false);
}

TextEncoderImpl::TextEncoderImpl(const TextEncoderConfig& c) : config_(c) {
  const int64_t w = c.width;
  const bool hf = !c.open_clip_layout;
  // transformers' CLIPTextModel names, or open_clip's
  struct Names {
    const char *outer, *list, *attn, *ln1, *ln2, *fc1, *fc2, *final_ln;
  };
  const Names n = hf ? Names{"encoder", "layers", "self_attn", "layer_norm1", "layer_norm2", "fc1", "fc2", "final_layer_norm"}
                     : Names{"transformer", "resblocks", "attn", "ln_1", "ln_2", "c_fc", "c_proj", "ln_final"};
  if (hf) {
    auto emb = container(*this, "embeddings");
    token_embedding_ = emb->register_module("token_embedding", Embedding(c.vocab_size, w));
    position_embedding_ = emb->register_module("position_embedding", Embedding(c.context_length, w))->weight;
  } else {
    token_embedding_ = register_module("token_embedding", Embedding(c.vocab_size, w));
    position_embedding_ = register_parameter("positional_embedding", placeholder({c.context_length, w}), false);
  }
  auto list = container(*container(*this, n.outer), n.list);
  for (int i = 0; i < c.layers; ++i) {
    auto l = container(*list, std::to_string(i));
    auto attn = container(*l, n.attn);
    auto mlp = container(*l, "mlp");
    Layer layer;
    if (hf) {
      layer.q = attn->register_module("q_proj", QLinear(w, w));
      layer.k = attn->register_module("k_proj", QLinear(w, w));
      layer.v = attn->register_module("v_proj", QLinear(w, w));
    } else {
      // open_clip's fused projection: attn.in_proj_weight / in_proj_bias = cat(q, k, v)
      layer.in_proj = std::make_shared<QLinearImpl>(w, 3 * w);
      attn->register_parameter("in_proj_weight", layer.in_proj->store.weight, false);
      attn->register_parameter("in_proj_bias", layer.in_proj->bias, false);
    }
    layer.out = attn->register_module("out_proj", QLinear(w, w));
    layer.ln1 = l->register_module(n.ln1, LayerNorm(w));
    layer.ln2 = l->register_module(n.ln2, LayerNorm(w));
    layer.fc1 = mlp->register_module(n.fc1, QLinear(w, c.mlp_dim));
    layer.fc2 = mlp->register_module(n.fc2, QLinear(c.mlp_dim, w));
    layers_.push_back(layer);
  }
  final_ln_ = register_module(n.final_ln, LayerNorm(w));
  if (c.projection_dim > 0) {
    text_projection_ = register_parameter("text_projection",
                                          placeholder({w, c.projection_dim}), false);
  }
}

std::map<std::string, QuantisedLayer*> TextEncoderImpl::fused_layers() const {
  std::map<std::string, QuantisedLayer*> out;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].in_proj) {
      out["transformer.resblocks." + std::to_string(i) + ".attn.in_proj_weight"] = layers_[i].in_proj.ptr().get();
    }
  }
  return out;
}

std::vector<std::string> TextEncoderImpl::ignorable_keys() {
  return {"embeddings.position_ids", "logit_scale"};
}

at::Tensor TextEncoderImpl::block(const Layer& l, const at::Tensor& x, const at::Tensor& mask) {
  const int64_t b = x.size(0), n = x.size(1), w = x.size(2), heads = config_.heads;
  const int64_t d = w / heads;
  auto h = l.ln1->forward(x);
  at::Tensor q, k, v;
  if (l.in_proj) {
    auto qkv = l.in_proj->forward(h).chunk(3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = l.q->forward(h), k = l.k->forward(h), v = l.v->forward(h);
  }
  auto split = [&](const at::Tensor& t) { return t.view({b, n, heads, d}).transpose(1, 2); };
  auto a = attention(split(q), split(k), split(v), 1.0 / std::sqrt(double(d)), mask);
  auto out = x + l.out->forward(a.transpose(1, 2).reshape({b, n, w}));
  auto m = l.fc1->forward(l.ln2->forward(out));
  m = config_.quick_gelu ? m * at::sigmoid(m * 1.702) : at::gelu(m);
  return out + l.fc2->forward(m);
}

TextEncoderOutput TextEncoderImpl::forward(const at::Tensor& tokens, int layer, bool final_norm,
                                           at::ScalarType compute, const TokenOverrides& overrides) {
  InferenceGuard no_grad;
  const int64_t n = tokens.size(1);
  auto tok = token_embedding_->forward(tokens);
  for (const auto& [pos, vectors] : overrides) {
    const int64_t k = std::min<int64_t>(vectors.size(0), n - pos);
    if (k > 0) tok.select(0, 0).slice(0, pos, pos + k).copy_(vectors.slice(0, 0, k).to(tok.options()));
  }
  auto x = tok.to(compute) + position_embedding_.slice(0, 0, n).to(compute).unsqueeze(0);
  auto mask = at::full({n, n}, -std::numeric_limits<float>::infinity(), x.options().dtype(at::kFloat)).triu(1);
  at::Tensor selected = layer == 0 ? x : at::Tensor();
  at::Tensor last;
  for (int i = 0; i < static_cast<int>(layers_.size()); ++i) {
    cancel_point();
    x = block(layers_[i], x, mask);
    if (i + 1 == layer) selected = x;
    // Only the pooled output needs layers past the selected one.
    if (i + 1 >= layer && !text_projection_.defined()) break;
  }
  last = x;
  TextEncoderOutput out;
  out.hidden = (final_norm ? final_ln_->forward(selected) : selected).to(at::kFloat);
  if (text_projection_.defined()) {
    auto normed = final_ln_->forward(last).to(at::kFloat);
    auto eos = tokens.argmax(-1);
    auto rows = normed.index({at::arange(tokens.size(0), eos.options()), eos});
    out.pooled = at::matmul(rows, text_projection_.to(at::kFloat));
  }
  return out;
}

}  // namespace fp8s
