// Qwen-Image's autoencoder (the Wan 2.1 VAE, a causal 3-D convolutional VAE) run on one frame, in
// its original names (../shared/reference/qwenimage/README.md, "The autoencoder on one frame"):
// `encoder.*`, `decoder.*`, `conv1` (quant) and `conv2` (post-quant). For one frame a causal k×k×k
// convolution meets data only through its last temporal slice, so each is a 2-D convolution on
// `weight[:, :, k-1]`; the temporal `time_conv` layers never run and are not loaded. Latents are
// normalised per channel with the released mean and std (no scale factor).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/nn.h"

namespace fp8s {

struct QwenImageVaeConfig {
  int base_dim = 96, z_dim = 16, num_res_blocks = 2;
  std::vector<int> dim_mult{1, 2, 4, 4};
  std::vector<bool> temporal_down{false, true, true};
  std::vector<float> latents_mean{-0.7571f, -0.7089f, -0.9113f, 0.1075f, -0.1745f, 0.9653f, -0.1517f, 1.5508f,
                                  0.4134f,  -0.0715f, 0.5517f,  -0.3632f, -0.1922f, -0.9497f, 0.2503f, -0.2921f};
  std::vector<float> latents_std{2.8184f, 1.4541f, 2.3275f, 2.6558f, 1.2196f, 1.7708f, 2.6052f, 2.0743f,
                                 3.2687f, 2.1526f, 2.8652f, 1.5579f, 1.6382f, 1.1253f, 2.8251f, 1.9160f};
  int factor() const { return 1 << (static_cast<int>(dim_mult.size()) - 1); }  // 8
};
// From the shapes (base width off encoder.conv1, z_dim off conv2), the rest from
// `qwenimage_vae.config` metadata (the tiny files) else the released values. InputError naming the
// file when it is not this autoencoder.
QwenImageVaeConfig qwenimage_vae_config(const SafetensorsFile& file, const std::string& prefix);
// Its temporal convolutions (`time_conv`, [out, in, 3, 1, 1] with a bias), which one frame never
// runs: their key prefix ("encoder.downsamples.5.time_conv") and widths; their keys are not loaded.
struct QwenImageTemporalConv {
  std::string prefix;
  int64_t out, in;
};
std::vector<QwenImageTemporalConv> qwenimage_vae_temporal_convs(const QwenImageVaeConfig& config);
std::vector<std::string> qwenimage_vae_temporal_keys(const QwenImageVaeConfig& config);
// Whether the file holds the Wan 2.1 autoencoder's names under `prefix`.
bool is_qwenimage_vae(const SafetensorsFile& file, const std::string& prefix);

class QwenImageVaeImpl : public torch::nn::Module {
 public:
  explicit QwenImageVaeImpl(const QwenImageVaeConfig& config);
  // image [B, 3, H, W] in [-1, 1] (H, W multiples of 8) -> the normalised latent [B, 16, H/8, W/8]:
  // (posterior mean - mean) / std. FP32 out; computes in `compute`.
  at::Tensor encode(const at::Tensor& image, at::ScalarType compute) const;
  // The posterior's mean and log-variance (clamped to [-30, 20]), un-normalised, [B, 32, h, w].
  at::Tensor moments(const at::Tensor& image, at::ScalarType compute) const;
  // (x - mean) / std per channel, and back.
  at::Tensor normalise(const at::Tensor& z) const;
  at::Tensor denormalise(const at::Tensor& latent) const;
  // latent (normalised) [B, 16, h, w] -> image [B, 3, 8h, 8w] clamped to [-1, 1], FP32.
  at::Tensor decode(const at::Tensor& latent, at::ScalarType compute) const;
  const QwenImageVaeConfig& config() const { return config_; }
  std::vector<std::string> ignorable_keys() const { return qwenimage_vae_temporal_keys(config_); }

  struct Conv {  // a causal 3-D (or 2-D) convolution's weight and bias as the file holds them
    at::Tensor weight, bias;
  };
  struct Residual {
    at::Tensor norm1, norm2;
    Conv conv1, conv2, shortcut;
  };
  struct Attention {
    at::Tensor norm;
    Conv qkv, proj;
  };
  struct Stage {  // a residual block or a resample (2-D conv of stride 2, or ×2 nearest + conv)
    bool is_resample = false;
    Residual res;
    Conv resample;
  };
  struct Coder {
    Conv conv_in, head_conv;
    std::vector<Stage> stages;
    Residual mid1, mid2;
    Attention attn;
    at::Tensor head_norm;
  };

 private:
  at::Tensor run_coder(const Coder& c, at::Tensor x, bool decoder, at::ScalarType compute) const;

  QwenImageVaeConfig config_;
  Coder encoder_, decoder_;
  Conv quant_, post_quant_;
};
TORCH_MODULE(QwenImageVae);

}  // namespace fp8s
