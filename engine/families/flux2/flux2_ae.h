// FLUX.2's autoencoder (BFL `flux2.autoencoder.AutoEncoder`; ../shared/reference/flux2/README.md,
// "Pixels"): Flux.1's encoder and decoder with 32 latent channels and their quant convs inside
// (encoder.quant_conv, decoder.post_quant_conv), then the model space: the latent patchified 2x2 to
// 128 channels (channel c·4 + py·2 + px) and normalised by the BatchNorm running statistics `bn.*`.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/vae.h"

namespace fp8s {

// Flux.1's autoencoder module (its names as the file has them) with the model space around it.
class Flux2AutoencoderImpl : public VaeImpl {
 public:
  // The autoencoder's shapes under `prefix` ("" for vae/flux2-vae.safetensors), and the BatchNorm
  // statistics read now (InputError naming the file when they are absent: Flux.1's ae.safetensors).
  Flux2AutoencoderImpl(const SafetensorsFile& file, const std::string& prefix);
  // images [B,3,H,W] in [-1,1] (on the module's device) -> the model-space latent [B,128,H/2f,W/2f]
  // (the posterior mean), FP32 on the CPU.
  at::Tensor encode_model(const at::Tensor& images, at::ScalarType compute);
  // model-space latent [B,128,h,w] -> images [B,3,2fh,2fw] on `device`, unclamped, FP32.
  at::Tensor decode_model(const at::Tensor& latent, at::ScalarType compute, const at::Device& device);
  int factor() const;  // pixels per latent pixel before the 2x2 patchify (8 released, 2 tiny)
  // the statistics the module reads at construction, not as weights
  static std::vector<std::string> ignorable_keys() { return {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}; }

 private:
  at::Tensor mean_, std_;  // [1,128,1,1] FP32 on the CPU
};
TORCH_MODULE(Flux2Autoencoder);

// The autoencoder under `prefix` of `file` loaded in `storage` onto `device` (a missing or
// unexpected key: InputError).
Flux2Autoencoder load_flux2_autoencoder(const SafetensorsFile& file, const std::string& prefix, const StorageSpec& storage,
                                        const at::Device& device);

// The 2x2 patchify of a latent [B,C,2h,2w] -> [B,4C,h,w] (channel c·4 + py·2 + px), and its inverse.
at::Tensor flux2_patchify(const at::Tensor& z);
at::Tensor flux2_unpatchify(const at::Tensor& x);

}  // namespace fp8s
