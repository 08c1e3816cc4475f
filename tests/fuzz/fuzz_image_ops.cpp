// libFuzzer target: the img2img / inpainting image path without LibTorch, as a user's init image
// and mask reach it (any size, any content): the request checks, the resize modes, the mask
// luminance, blur, crop region and the overlay, on an image and a mask made from the input bytes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "io/image_ops.h"
#include "pipeline/request.h"

namespace {

fp8s::RgbImage image_from(const uint8_t* data, size_t size, int w, int h) {
  fp8s::RgbImage im;
  im.width = w;
  im.height = h;
  im.pixels.resize(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = size ? data[i % size] : 0;
  return im;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const int w = 1 + data[0] % 48, h = 1 + data[1] % 48;          // init image
  const int mw = data[2] & 1 ? w : 1 + data[2] % 48, mh = h;      // mask (sometimes another size)
  const int ow = 8 * (1 + data[3] % 8), oh = 8 * (1 + data[4] % 8);  // output size
  const auto mode = static_cast<fp8s::ResizeMode>(data[5] % 3);
  const int blur = data[6] % 9, padding = data[7] % 40;
  const auto init = image_from(data + 8, size - 8, w, h);
  const auto mask_rgb = image_from(data + 8, size - 8, mw, mh);
  fp8s::GenerationRequest r;
  r.width = ow < 64 ? 64 : ow;
  r.height = oh < 64 ? 64 : oh;
  r.init_image = init;
  r.mask = mask_rgb;
  r.mask_blur = blur;
  r.inpaint_full_res_padding = padding;
  r.denoising_strength = (data[3] % 13) / 10.0f;
  try {
    fp8s::validate_request(r, 512);
  } catch (const fp8s::InputError&) {
  }
  const auto resized = fp8s::resize_to(init, ow, oh, mode);
  if (resized.width != ow || resized.height != oh || resized.pixels.size() != static_cast<std::size_t>(ow) * oh * 3) std::abort();
  auto mask = fp8s::blur_mask(fp8s::luminance(mask_rgb), blur);
  if (mask.width != mw || mask.height != mh) std::abort();
  const auto region = fp8s::mask_crop_region(mask, padding);
  if (region.x1 < 0 || region.y1 < 0 || region.x2 > mw || region.y2 > mh || region.width() <= 0 || region.height() <= 0) std::abort();
  const auto grown = fp8s::expand_crop_region(region, ow, oh, mw, mh);
  if (grown.x1 < 0 || grown.y1 < 0 || grown.x2 > mw || grown.y2 > mh || grown.width() <= 0 || grown.height() <= 0) std::abort();
  const auto part = fp8s::crop(mask, grown);
  const auto big = fp8s::resize_to(part, ow, oh, fp8s::ResizeMode::Fill);
  const auto out = fp8s::overlay_original(resized, resized, big);
  if (out.pixels != resized.pixels) std::abort();  // overlaying an image on itself changes nothing
  if (data[0] & 1) (void)fp8s::fill_masked(resized, big);
  return 0;
}
