// img2img and inpainting around the sampler, as A1111's StableDiffusionProcessingImg2Img does it:
// the init image resized (or, "only masked", the mask's region cropped and enlarged), the mask
// blurred, the masked content prepared, the image encoded (the posterior sampled with the seed's
// generator), the latent mask, a 9-channel UNet's conditioning; after decoding, the original pixels
// pasted back outside the mask.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "io/image_ops.h"
#include "pipeline/request.h"

namespace fp8s {

// What the request's images become before sampling (one batch; the same for every image of it).
struct ImageJob {
  RgbImage source;                   // the init image as the model sees it (width x height), masked content applied
  std::optional<GrayImage> mask;     // the blurred mask at width x height (255 = repaint)
  RgbImage original;                 // the init image the overlay restores (at the output size)
  GrayImage overlay_mask;            // A1111's mask_for_overlay at the output size
  std::optional<Rect> paste_region;  // "only masked": where the result goes back into `original`
};

// Resizes, blurs and crops as the request asks; `width` x `height` is the sampling size.
ImageJob prepare_image_job(const GenerationRequest& request, int width, int height);

// Decoded images [B,3,H,W] in [-1,1] -> 8-bit RGB: floor(clamp((x + 1) / 2, 0, 1) * 255 + 0.5).
std::vector<RgbImage> to_images(const at::Tensor& decoded);
// 8-bit RGB -> [1,3,H,W] in [-1,1] (x / 127.5 − 1).
at::Tensor image_tensor(const RgbImage& image);
// [1,1,H,W] float of a mask / 255.
at::Tensor mask_tensor(const GrayImage& mask);

struct PreparedInit {
  at::Tensor latent;      // [B,C,h,w]
  at::Tensor keep;        // [B,C,h,w] 1 = keep the init latent (undefined without a mask)
  at::Tensor image_cond;  // [B,5,h,w] for a 9-channel UNet (undefined otherwise)
};
// The job's latent mask (A1111: the mask resized to the latent, rounded; `out.keep`, 1 = keep) and
// the latent masked-content modes (latent noise from `gen`, latent nothing) applied to
// `out.latent` [batch, C, h, w], any C (the family's latent channels). Nothing without a mask.
void apply_latent_mask(PreparedInit& out, const ImageJob& job, const GenerationRequest& request, int batch,
                       at::Generator& gen);
// The decoded image (width x height) finished as A1111 does: pasted back into the original
// ("only masked") and overlaid with the original pixels outside the mask.
RgbImage finish_image(const ImageJob& job, const RgbImage& decoded);

}  // namespace fp8s
