// A decoder-only language model as a text encoder, in Hugging Face's names under a prefix
// (`model.` + embed_tokens, layers.N.*, norm): Llama-style layers (RMS norms, grouped-query
// attention with rotate-half RoPE, the causal and the padding mask, SwiGLU) with what tells Qwen3,
// Qwen2.5 and Mistral apart as configuration: q/k norms over the head dimension, q/k/v biases, the
// RoPE θ. The output is one hidden state or several concatenated along the features (HF's
// `hidden_states[i]`: 0 the embeddings, i the state after layer i; the last with the final norm),
// so a family asks for Z-Image's `hidden_states[-2]` or FLUX.2's layers 9/18/27 alike, and only the
// layers it reads are built and loaded. ComfyUI serves these with one module and a config per model
// (comfy/text_encoders/llama.py); so does this. Its Linear layers are QLinear: FP8 storage and the
// FP8 files cover them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/nn.h"
#include "models/text_encoder.h"

namespace fp8s {

struct DecoderLmConfig {
  std::string name = "Qwen3";  // what messages call it
  // Qwen3-4B's by default: 2560 wide, 36 layers, 32 query heads and 8 key/value heads of 128, MLP 9728
  int vocab_size = 151936, hidden = 2560, intermediate = 9728, layers = 36, heads = 32, kv_heads = 8, head_dim = 128;
  double eps = 1e-6, rope_theta = 1e6;
  bool qk_norm = true;    // Qwen3: RMS norms of q and k per head before RoPE
  bool qkv_bias = false;  // Qwen2.5: biases on the q, k and v projections
  // The hidden states returned (HF's indices, 0..layers), concatenated along the features in this
  // order. Empty: hidden_states[-2] (layers - 1).
  std::vector<int> outputs;
  // The state after the last layer goes through the final norm `norm` (HF's hidden_states[-1],
  // Qwen-Image's); else it is the raw residual stream (FLUX.2's layer 30 of a pruned Mistral file).
  bool normed_last = false;
  // one layer's weights (elements): its attention and MLP projections
  uint64_t layer_weights() const {
    const auto h = static_cast<uint64_t>(hidden), q = static_cast<uint64_t>(heads) * head_dim,
               kv = static_cast<uint64_t>(kv_heads) * head_dim;
    return h * (2 * q + 2 * kv) + 3 * h * static_cast<uint64_t>(intermediate);
  }
  std::vector<int> output_layers() const;  // `outputs`, or {layers - 1}
  int layers_run() const;                  // the layers the outputs need
  bool final_norm() const;                 // normed_last and an output is the last state
};
// `base` with the sizes read off the file's shapes under `prefix` ("model."), eps and θ from the
// metadata `metadata_key` (the tiny reference files) or `config.json`, else `base`'s; q/k norms and
// biases from which tensors exist. InputError naming the file when it is not such a model.
DecoderLmConfig decoder_lm_config(const SafetensorsFile& file, const std::string& prefix, const DecoderLmConfig& base,
                                  const std::string& metadata_key);

class DecoderLmImpl : public BlockNetwork {
 public:
  explicit DecoderLmImpl(const DecoderLmConfig& config);
  // tokens [B, L] (int64), mask [B, L] (1 token, 0 padding; undefined: all tokens) -> the chosen
  // hidden states concatenated, [B, L, hidden × outputs], FP32. Positions are 0..L-1 whatever the
  // mask; padded keys are masked for every query.
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& mask, at::ScalarType compute);
  const DecoderLmConfig& config() const { return config_; }
  // The keys of a file of this configuration (its `layers` layers) that the model does not hold:
  // the layers after the last one read, the final norm when no output needs it, an lm_head.
  static std::vector<std::string> ignorable_keys(const DecoderLmConfig& config);
  // blocks(): "layers.N" (BlockNetwork)

 private:
  struct Layer {
    at::Tensor input_norm, post_norm, q_norm, k_norm;
    QLinear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, gate{nullptr}, up{nullptr}, down{nullptr};
  };
  DecoderLmConfig config_;
  Embedding embed_{nullptr};
  std::vector<Layer> layers_;
  at::Tensor norm_;  // the final norm (when an output needs it)
};
TORCH_MODULE(DecoderLm);

}  // namespace fp8s
