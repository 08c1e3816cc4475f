// The T5 v1.1 encoder (google/t5-v1_1-xxl, Flux's second text encoder) in Hugging Face's
// T5EncoderModel names: relative position buckets (bidirectional), RMS norms, gated-GELU feed
// forward, no attention scaling. Its Linear layers are QLinear, so FP8 storage covers them.
#pragma once

#include <string>

#include "models/nn.h"
#include "models/text_encoder.h"

namespace fp8s {

// T5-XXL's: 4096 wide, 64 heads of 64, d_ff 10,240, 24 layers, 32 buckets up to distance 128.
struct T5Config {
  int d_model = 4096, d_kv = 64, num_heads = 64, d_ff = 10240, num_layers = 24, vocab_size = 32128;
  int buckets = 32, max_distance = 128;
};
// `t5.config` metadata (the tiny reference files), else T5-XXL's.
T5Config parse_t5_config(const std::string& json_text, const std::string& label);

class T5EncoderImpl : public BlockNetwork {
 public:
  explicit T5EncoderImpl(const T5Config& config);
  // tokens [B, L] -> the final-RMS-normed hidden states [B, L, d_model], FP32 (no attention mask:
  // BFL pads to the full length and attends to the padding too).
  at::Tensor forward(const at::Tensor& tokens, at::ScalarType compute);
  const T5Config& config() const { return config_; }

  // The bucket of each (query, key) relative position: HF's _relative_position_bucket with
  // bidirectional=True. [L, L] int64.
  static at::Tensor relative_buckets(int64_t length, int buckets, int max_distance);

  // blocks(): its layers, "encoder.block.N" (BlockNetwork)

 private:
  struct Block {
    at::Tensor ln1, ln2;  // RMS norm weights
    QLinear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, wi0{nullptr}, wi1{nullptr}, wo{nullptr};
  };
  T5Config config_;
  Embedding shared_{nullptr}, relative_bias_{nullptr};
  std::vector<Block> blocks_;
  at::Tensor final_ln_;
};
TORCH_MODULE(T5Encoder);

}  // namespace fp8s
