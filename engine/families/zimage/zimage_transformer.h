// The Z-Image transformer (Tongyi-MAI's single-stream DiT, Lumina-2's NextDiT family) in its
// original key names (../shared/reference/zimage/README.md, "zimage: one transformer call"):
// 2x2 patches of the 16-channel latent, the caption embedder, the noise and context refiners,
// the single-stream layers with their tanh-gated modulation, 3-axis RoPE over (caption index,
// row, column), and the final layer. Its Linear layers are QLinear: FP8 storage covers them.
#pragma once

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/nn.h"

namespace fp8s {

// Z-Image Turbo's: dim 3840, 30 layers, 2 + 2 refiners, 30 heads of 128, caption 2560, FFN 10240.
struct ZImageConfig {
  int dim = 3840, layers = 30, noise_refiners = 2, context_refiners = 2, heads = 30, head_dim = 128;
  int cap_dim = 2560, ffn = 10240, adaln = 256, t_mid = 1024, channels = 16, patch = 2;
  std::vector<int> axes_dims{32, 48, 48};
  double rope_theta = 256, t_scale = 1000, eps = 1e-5;
};
// From the shapes under `prefix`, the rest from `zimage.config` metadata (the tiny reference
// files) else Z-Image Turbo's. InputError naming the file when a size does not add up.
ZImageConfig zimage_config(const SafetensorsFile& file, const std::string& prefix);

class ZImageTransformerImpl : public BlockNetwork {
 public:
  explicit ZImageTransformerImpl(const ZImageConfig& config);
  // x [B, 16, H, W] (H, W even), t [B] (1 - sigma: 0 at pure noise), cap [B, Lmax, cap_dim] of which
  // item b uses its first cap_len[b] rows -> the raw prediction [B, 16, H, W] (the flow velocity is
  // its negative), FP32. Each item runs alone (what diffusers' masked batch computes).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& cap, const std::vector<int64_t>& cap_len,
                     at::ScalarType compute);
  const ZImageConfig& config() const { return config_; }
  static std::vector<std::string> ignorable_keys() { return {"norm_final.weight"}; }  // some fine-tunes' stray tensor

  // blocks(): the refiners and layers in execution order (BlockNetwork)

 private:
  struct Block {
    bool modulated = true;
    QLinear qkv{nullptr}, out{nullptr}, w1{nullptr}, w2{nullptr}, w3{nullptr}, ada{nullptr};
    at::Tensor q_norm, k_norm, attn_norm1, attn_norm2, ffn_norm1, ffn_norm2;
  };
  Block make_block(const std::string& group, int index, bool modulated);
  at::Tensor run_block(const Block& b, at::Tensor x, const std::pair<at::Tensor, at::Tensor>& pe, const at::Tensor& t_emb,
                       int index);
  at::Tensor item(const at::Tensor& x, const at::Tensor& t_emb, const at::Tensor& cap, at::ScalarType compute);

  ZImageConfig config_;
  QLinear x_embedder_{nullptr}, t_mlp0_{nullptr}, t_mlp2_{nullptr}, cap_linear_{nullptr}, final_ada_{nullptr},
      final_linear_{nullptr};
  at::Tensor cap_norm_, x_pad_, cap_pad_;
  std::vector<Block> noise_refiner_, context_refiner_, layers_;
};
TORCH_MODULE(ZImageTransformer);

}  // namespace fp8s
