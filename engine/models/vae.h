// AutoencoderKL (ldm `Encoder`/`Decoder` + quant convs), named as the checkpoint's
// `first_stage_model.*`: encode images to diffusion latents and decode latents to images.
#pragma once

#include "models/architecture.h"
#include "models/nn.h"

namespace fp8s {

class VaeResnetImpl : public torch::nn::Module {
 public:
  VaeResnetImpl(int64_t in, int64_t out);
  at::Tensor forward(const at::Tensor& x) const;

 private:
  GroupNorm norm1_{nullptr}, norm2_{nullptr};
  QConv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_{nullptr};
};
TORCH_MODULE(VaeResnet);

class VaeAttentionImpl : public torch::nn::Module {
 public:
  explicit VaeAttentionImpl(int64_t channels);
  at::Tensor forward(const at::Tensor& x) const;

 private:
  GroupNorm norm_{nullptr};
  QConv2d q_{nullptr}, k_{nullptr}, v_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(VaeAttention);

class VaeImpl : public torch::nn::Module {
 public:
  explicit VaeImpl(const VaeConfig& config);
  // image [B,3,H,W] in [-1,1] -> latent [B,4,H/8,W/8] (posterior mean x scale factor), FP32.
  at::Tensor encode(const at::Tensor& image, at::ScalarType compute);
  // image -> the posterior's [mean; logvar] (unscaled), FP32: what training needs.
  at::Tensor encode_moments(const at::Tensor& image, at::ScalarType compute);
  void set_scale_factor(float f) { config_.scale_factor = f; }
  // diffusion latent -> image [B,3,8h,8w], unclamped, FP32.
  at::Tensor decode(const at::Tensor& latent, at::ScalarType compute);
  const VaeConfig& config() const { return config_; }

 private:
  struct Level {
    std::vector<VaeResnet> blocks;
    QConv2d resample{nullptr};
  };
  VaeConfig config_;
  QConv2d enc_in_{nullptr}, enc_out_{nullptr}, dec_in_{nullptr}, dec_out_{nullptr};
  QConv2d quant_{nullptr}, post_quant_{nullptr};
  std::vector<Level> down_, up_;  // up_[i] is decoder.up.i (run from the last to 0)
  VaeResnet enc_mid1_{nullptr}, enc_mid2_{nullptr}, dec_mid1_{nullptr}, dec_mid2_{nullptr};
  VaeAttention enc_attn_{nullptr}, dec_attn_{nullptr};
  GroupNorm enc_norm_{nullptr}, dec_norm_{nullptr};
};
TORCH_MODULE(Vae);

}  // namespace fp8s
