// The Flux.1 transformer (Black Forest Labs' `Flux`, `src/flux/model.py` and `modules/layers.py`)
// with parameter names equal to the released files' (`img_in`, `time_in`, `vector_in`,
// `guidance_in`, `txt_in`, `double_blocks.N`, `single_blocks.N`, `final_layer`). Every Linear is a
// QLinear, so FP8 storage covers the whole transformer.
#pragma once

#include <string>
#include <vector>

#include "models/nn.h"
#include "models/streaming.h"

namespace fp8s {

// The released configuration: 3072 wide, 24 heads, 19 double and 38 single blocks, RoPE axes
// 16/56/56 at θ 10,000, MLP ratio 4, 64 packed latent channels, CLIP-L's 768 and T5's 4096 inputs.
struct FluxConfig {
  int hidden_size = 3072, num_heads = 24, depth = 19, depth_single_blocks = 38;
  std::vector<int> axes_dim{16, 56, 56};
  double theta = 10000, mlp_ratio = 4.0;
  int in_channels = 64, vec_in_dim = 768, context_in_dim = 4096;
  bool guidance_embed = true;  // dev; schnell has no guidance_in
  int head_dim() const { return hidden_size / num_heads; }
  int mlp_hidden() const { return static_cast<int>(hidden_size * mlp_ratio); }
};
// `flux.config` metadata (the tiny reference files) over the released configuration; `guidance`
// is what the keys say (guidance_in.* present: dev).
FluxConfig parse_flux_config(const std::string& json_text, bool guidance, const std::string& label);

// BFL's timestep_embedding: t · 1000 (time_factor), cos then sin over `dim` frequencies, FP32.
at::Tensor flux_timestep_embedding(const at::Tensor& t, int64_t dim);
// EmbedND + rope: (cos, sin) [B, 1, N, head_dim/2] of the position ids [B, N, 3], FP32.
std::pair<at::Tensor, at::Tensor> flux_rope(const at::Tensor& ids, const std::vector<int>& axes_dim, double theta);
// apply_rope: each interleaved pair (2k, 2k+1) of x's last dimension rotated by its angle (flux_rope's
// cos, sin), in FP32, back in x's type.
// FP16 compute: the text stream after a double block and the joint stream after a single block
// overflow FP16 on the released weights (ComfyUI clamps the same places): infinities become
// ±65504 and NaN 0. Other types pass unchanged.
at::Tensor flux_fp16_clamp(const at::Tensor& x);
// Registers a Flux block's QK norm under `parent`: "norm.query_norm.scale" and "norm.key_norm.scale",
// each of width `head_dim`, into `q` and `k` (Flux.1 and FLUX.2 name them alike).
void flux_qk_norm(torch::nn::Module& parent, int64_t head_dim, at::Tensor& q, at::Tensor& k);

at::Tensor flux_apply_rope(const at::Tensor& x, const std::pair<at::Tensor, at::Tensor>& pe);

class FluxImpl : public BlockNetwork {
 public:
  explicit FluxImpl(const FluxConfig& config);
  // One call of Flux.forward: img [B, N, 64] packed latent tokens, img_ids [B, N, 3], txt [B, L, 4096],
  // txt_ids [B, L, 3], t [B] in [0, 1], y [B, 768] pooled CLIP-L, guidance [B] (dev; ignored by
  // schnell). Returns the flow prediction [B, N, 64] in FP32; computes in `compute`.
  at::Tensor forward(const at::Tensor& img, const at::Tensor& img_ids, const at::Tensor& txt, const at::Tensor& txt_ids,
                     const at::Tensor& t, const at::Tensor& y, const at::Tensor& guidance, at::ScalarType compute);
  const FluxConfig& config() const { return config_; }
  // blocks(): "double_blocks.0" ... "single_blocks.37" (BlockNetwork)

 private:
  struct Embedder {
    QLinear in{nullptr}, out{nullptr};
  };
  struct Stream {  // one stream of a double block
    QLinear mod{nullptr}, qkv{nullptr}, proj{nullptr}, mlp0{nullptr}, mlp2{nullptr};
    at::Tensor q_norm, k_norm;
  };
  struct Single {
    QLinear mod{nullptr}, linear1{nullptr}, linear2{nullptr};
    at::Tensor q_norm, k_norm;
  };
  Embedder embedder(const std::string& name, int64_t in);
  Stream stream(torch::nn::Module& block, const std::string& prefix);

  FluxConfig config_;
  QLinear img_in_{nullptr}, txt_in_{nullptr}, final_mod_{nullptr}, final_linear_{nullptr};
  Embedder time_in_, vector_in_, guidance_in_;
  std::vector<std::pair<Stream, Stream>> double_;  // (img, txt)
  std::vector<Single> single_;
};
TORCH_MODULE(Flux);

}  // namespace fp8s
