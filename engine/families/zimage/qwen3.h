// Qwen3 as Z-Image's text encoder, in Hugging Face's Qwen3Model names (`model.` + ...): RMS norms,
// q/k norms over the head dimension before RoPE (rotate-half), grouped-query attention with the
// causal and the padding mask, SwiGLU; the output is `hidden_states[-2]`, the state after the
// second-to-last layer (no final norm), so the last layer and `model.norm` are not loaded.
// Its Linear layers are QLinear: FP8 storage and the FP8 files cover them.
#pragma once

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/nn.h"
#include "models/text_encoder.h"

namespace fp8s {

// Qwen3-4B's: 2560 wide, 36 layers, 32 query heads and 8 key/value heads of 128, MLP 9728.
struct Qwen3Config {
  int vocab_size = 151936, hidden = 2560, intermediate = 9728, layers = 36, heads = 32, kv_heads = 8, head_dim = 128;
  double eps = 1e-6, rope_theta = 1e6;
};
// From the file's shapes under `prefix` ("model."), the rest from `qwen3.config` metadata (the tiny
// reference files) else Qwen3-4B's. InputError naming the file when it is not a Qwen3 model.
Qwen3Config qwen3_config(const SafetensorsFile& file, const std::string& prefix);

class Qwen3EncoderImpl : public torch::nn::Module {
 public:
  explicit Qwen3EncoderImpl(const Qwen3Config& config);
  // tokens [B, L] (int64), mask [B, L] (1 token, 0 padding; undefined: all tokens) -> the state
  // after layer layers-2, [B, L, hidden], FP32. Positions are 0..L-1 whatever the mask; padded keys
  // are masked for every query.
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& mask, at::ScalarType compute);
  const Qwen3Config& config() const { return config_; }
  // The keys of a file of this configuration that the encoder does not hold: the last layer and
  // the final norm.
  static std::vector<std::string> ignorable_keys(const Qwen3Config& config);

  const std::vector<NetworkBlock>& blocks() const { return network_blocks_; }
  void set_block_hooks(BlockHooks* hooks) { hooks_ = hooks; }

 private:
  struct Layer {
    at::Tensor input_norm, post_norm, q_norm, k_norm;
    QLinear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, gate{nullptr}, up{nullptr}, down{nullptr};
  };
  Qwen3Config config_;
  Embedding embed_{nullptr};
  std::vector<Layer> layers_;
  std::vector<NetworkBlock> network_blocks_;
  BlockHooks* hooks_ = nullptr;
};
TORCH_MODULE(Qwen3Encoder);

}  // namespace fp8s
