#include "pipeline/img2img.h"

#include <algorithm>


namespace fp8s {

ImageJob prepare_image_job(const GenerationRequest& r, int width, int height) {
  ImageJob job;
  const RgbImage& init = *r.init_image;
  if (!r.mask) {
    job.source = resize_to(init, width, height, r.resize_mode);
    return job;
  }
  GrayImage mask = luminance(*r.mask);
  if (r.invert_mask) mask = inverted(mask);
  mask = blur_mask(mask, r.mask_blur);
  if (r.inpaint_full_res) {
    // the mask's region (+ padding, grown to the output's aspect ratio) processed at full size
    Rect region = mask_crop_region(mask, r.inpaint_full_res_padding);
    region = expand_crop_region(region, width, height, mask.width, mask.height);
    job.paste_region = region;
    job.original = init;
    job.overlay_mask = mask;
    job.mask = resize_to(crop(mask, region), width, height, ResizeMode::Fill);
    job.source = resize_to(crop(init, region), width, height, ResizeMode::Fill);
  } else {
    job.mask = resize_to(mask, width, height, r.resize_mode);
    job.source = resize_to(init, width, height, r.resize_mode);
    job.original = job.source;
    job.overlay_mask = *job.mask;
    for (auto& v : job.overlay_mask.pixels) v = static_cast<uint8_t>(std::min(255, 2 * v));  // A1111 doubles it
  }
  if (r.inpainting_fill == InpaintFill::Fill) job.source = fill_masked(job.source, *job.mask);
  return job;
}

std::vector<RgbImage> to_images(const at::Tensor& decoded) {
  // floor(clamp((x + 1) / 2, 0, 1) * 255 + 0.5) per channel
  auto u8 = ((decoded + 1) / 2).clamp(0, 1).mul(255).add(0.5).floor().to(at::kByte);
  u8 = u8.permute({0, 2, 3, 1}).contiguous();
  std::vector<RgbImage> out;
  for (int64_t i = 0; i < u8.size(0); ++i) {
    RgbImage img;
    img.height = static_cast<int>(u8.size(1));
    img.width = static_cast<int>(u8.size(2));
    auto one = u8[i];
    img.pixels.assign(one.data_ptr<uint8_t>(), one.data_ptr<uint8_t>() + one.numel());
    out.push_back(std::move(img));
  }
  return out;
}

at::Tensor image_tensor(const RgbImage& image) {
  auto t = at::from_blob(const_cast<uint8_t*>(image.pixels.data()), {1, image.height, image.width, 3}, at::kByte);
  return t.permute({0, 3, 1, 2}).to(at::kFloat).div(127.5).sub(1).contiguous();
}

at::Tensor mask_tensor(const GrayImage& m) {
  return at::from_blob(const_cast<uint8_t*>(m.pixels.data()), {1, 1, m.height, m.width}, at::kByte).to(at::kFloat).div(255);
}

void apply_latent_mask(PreparedInit& out, const ImageJob& job, const GenerationRequest& r, int batch, at::Generator& gen) {
  if (!job.mask) return;
  const int64_t c = out.latent.size(1), lh = out.latent.size(2), lw = out.latent.size(3);
  // A1111: the mask resized to the latent, rounded to 0/1 (1 = repaint)
  const at::Tensor nmask = mask_tensor(resize_gray(*job.mask, static_cast<int>(lw), static_cast<int>(lh), Filter::Bilinear)).round();
  out.keep = (1 - nmask).expand({batch, c, lh, lw}).contiguous();
  if (r.inpainting_fill == InpaintFill::LatentNoise) {
    out.latent = out.latent * out.keep + at::randn(out.latent.sizes(), gen, at::kFloat) * (1 - out.keep);
  } else if (r.inpainting_fill == InpaintFill::LatentNothing) {
    out.latent = out.latent * out.keep;
  }
}

RgbImage finish_image(const ImageJob& job, const RgbImage& decoded) {
  if (job.overlay_mask.pixels.empty()) return decoded;  // plain img2img: nothing to restore
  RgbImage generated = decoded;
  if (job.paste_region) {
    const Rect& r = *job.paste_region;
    generated = paste(job.original, resize_to(decoded, r.width(), r.height(), ResizeMode::Crop), r.x1, r.y1);
  }
  return overlay_original(generated, job.original, job.overlay_mask);
}

}  // namespace fp8s
