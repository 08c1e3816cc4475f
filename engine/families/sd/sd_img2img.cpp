#include "families/sd/sd_img2img.h"

#include "families/sd/model.h"

namespace fp8s {

at::Tensor encode_latent(const Model& model, const at::Tensor& images, ComputeType compute, at::Generator& gen,
                         int64_t copies) {
  auto moments = model.vae_moments(images, compute);
  if (copies > 1) moments = moments.repeat({copies, 1, 1, 1});
  const int64_t z = moments.size(1) / 2;
  const auto mean = moments.slice(1, 0, z);
  const auto logvar = moments.slice(1, z).clamp(-30.0, 20.0);
  const auto eps = at::randn(mean.sizes(), gen, at::kFloat);
  return (mean + at::exp(0.5 * logvar) * eps) * model.latent_scale();
}

PreparedInit prepare_init(const Model& model, const ImageJob& job, const GenerationRequest& r, int batch,
                          at::Generator& gen) {
  PreparedInit out;
  const at::Tensor image = image_tensor(job.source);  // one image, encoded once for the batch
  out.latent = encode_latent(model, image, r.compute, gen, batch);
  const int64_t lh = out.latent.size(2), lw = out.latent.size(3);
  apply_latent_mask(out, job, r, batch, gen);
  if (model.is_inpainting()) {
    // ldm's LatentInpaintDiffusion: mask (rounded, image size, then nearest to the latent) ++ the
    // latent of the image with the masked part zeroed
    at::Tensor m = job.mask ? mask_tensor(*job.mask).round() : at::ones({1, 1, image.size(2), image.size(3)});
    const auto masked = encode_latent(model, image * (1 - m), r.compute, gen, batch);
    m = at::upsample_nearest2d(m, {lh, lw}).expand({batch, 1, lh, lw});
    out.image_cond = at::cat({m, masked}, 1);
  }
  return out;
}

at::Tensor txt2img_image_cond(const Model& model, int batch, int height, int width, ComputeType compute,
                              at::Generator& gen) {
  const auto grey = encode_latent(model, at::zeros({1, 3, height, width}), compute, gen, batch);
  return at::cat({at::ones({batch, 1, grey.size(2), grey.size(3)}), grey}, 1);
}

}  // namespace fp8s
