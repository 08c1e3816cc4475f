// CLIP text encoders: the Hugging Face CLIPTextModel layout (SD1, SDXL embedder 0) and the
// open_clip layout (SDXL embedder 1), with parameter names equal to the checkpoint's.
#pragma once

#include <map>

#include "models/architecture.h"
#include "models/nn.h"

namespace fp8s {

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t count, int64_t dim);
  at::Tensor forward(const at::Tensor& ids) const { return at::embedding(weight, ids); }
  at::Tensor weight;
};
TORCH_MODULE(Embedding);

// Textual-inversion vectors that replace token embeddings: (position in the window, [n, D]).
using TokenOverrides = std::vector<std::pair<int64_t, at::Tensor>>;

struct TextEncoderOutput {
  at::Tensor hidden;  // [B, 77, D] FP32: the selected layer's output (after the final LN if asked)
  at::Tensor pooled;  // [B, P] FP32: open_clip's projected EOS state (undefined for HF CLIP)
};

class TextEncoderImpl : public torch::nn::Module {
 public:
  explicit TextEncoderImpl(const TextEncoderConfig& config);
  // `layer` = hidden state index (0 = embeddings, L = last layer's output); `final_norm` applies
  // the final LayerNorm to it. Runs in `compute`, returns FP32.
  // `overrides` replace the token embeddings at their positions (batch 1), as A1111's
  // EmbeddingsWithFixes does, before the position embeddings are added.
  TextEncoderOutput forward(const at::Tensor& tokens, int layer, bool final_norm,
                            at::ScalarType compute, const TokenOverrides& overrides = {});
  const TextEncoderConfig& config() const { return config_; }
  // Checkpoint keys under the prefix that the model does not use.
  static std::vector<std::string> ignorable_keys();
  // Layers stored under a parameter name rather than a module path: open_clip's fused
  // `transformer.resblocks.N.attn.in_proj_weight` -> its QLinear (relative keys).
  std::map<std::string, QuantisedLayer*> fused_layers() const;

 private:
  struct Layer {
    LayerNorm ln1{nullptr}, ln2{nullptr};
    QLinear q{nullptr}, k{nullptr}, v{nullptr}, out{nullptr}, in_proj{nullptr}, fc1{nullptr},
        fc2{nullptr};
  };
  at::Tensor block(const Layer& l, const at::Tensor& x, const at::Tensor& mask);

  TextEncoderConfig config_;
  Embedding token_embedding_{nullptr};
  at::Tensor position_embedding_;  // [77, D]
  std::vector<Layer> layers_;
  LayerNorm final_ln_{nullptr};
  at::Tensor text_projection_;  // open_clip: [D, P]
};
TORCH_MODULE(TextEncoder);

}  // namespace fp8s
