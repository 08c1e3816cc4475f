// The SD-specific half of img2img and inpainting (pipeline/img2img.h has the family-free half):
// the VAE posterior sampled with the seed's generator, and a 9-channel inpainting UNet's conditioning.
#pragma once

#include <ATen/ATen.h>

#include "pipeline/img2img.h"

namespace fp8s {

class Model;

// The latent of RGB images [B,3,H,W] in [-1,1]: the posterior mean + std·ε with ε from `gen`,
// times the model's scale factor.
// `copies` samples of the posterior of each image: the VAE encodes the images once, the generator
// draws the noise of every copy (the numbers of encoding `copies` stacked copies, in that order).
at::Tensor encode_latent(const Model& model, const at::Tensor& images, ComputeType compute, at::Generator& gen,
                         int64_t copies = 1);
// Encodes the job for a batch of `batch` with the seed's generator `gen` (after the initial noise
// was drawn from it) and applies the latent masked-content modes.
PreparedInit prepare_init(const Model& model, const ImageJob& job, const GenerationRequest& request, int batch,
                          at::Generator& gen);
// A 9-channel UNet's conditioning for txt2img: a mask of ones and the latent of a grey image.
at::Tensor txt2img_image_cond(const Model& model, int batch, int height, int width, ComputeType compute,
                              at::Generator& gen);

}  // namespace fp8s
