// FLUX.2's autoencoder (BFL `flux2.autoencoder.AutoEncoder`; ../shared/reference/flux2/README.md,
// "Pixels"): Flux.1's encoder and decoder with 32 latent channels and their quant convs inside
// (encoder.quant_conv, decoder.post_quant_conv), then the model space: the latent patchified 2x2 to
// 128 channels (channel c·4 + py·2 + px) and normalised by the BatchNorm running statistics `bn.*`.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "io/safetensors.h"
#include "models/vae.h"

namespace fp8s {

class Flux2Autoencoder {
 public:
  // Reads the autoencoder under `prefix` ("" for vae/flux2-vae.safetensors) in `storage` onto `device`.
  Flux2Autoencoder(const SafetensorsFile& file, const std::string& prefix, const StorageSpec& storage, const at::Device& device);
  // images [B,3,H,W] in [-1,1] -> the model-space latent [B,128,H/2f,W/2f] (the posterior mean), FP32 on the CPU.
  at::Tensor encode(const at::Tensor& images, at::ScalarType compute);
  // model-space latent [B,128,h,w] -> images [B,3,2fh,2fw], unclamped, FP32.
  at::Tensor decode(const at::Tensor& latent, at::ScalarType compute);
  int factor() const;  // pixels per latent pixel before the 2x2 patchify (8 released, 2 tiny)
  uint64_t bytes() const { return bytes_; }

 private:
  Vae vae_{nullptr};
  at::Tensor mean_, std_;  // [1,128,1,1] FP32 on the CPU
  at::Device device_;
  uint64_t bytes_ = 0;
};

// The 2x2 patchify of a latent [B,C,2h,2w] -> [B,4C,h,w] (channel c·4 + py·2 + px), and its inverse.
at::Tensor flux2_patchify(const at::Tensor& z);
at::Tensor flux2_unpatchify(const at::Tensor& x);

}  // namespace fp8s
