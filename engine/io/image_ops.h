// Image operations for img2img and inpainting, following A1111 (modules/images.py resize_image,
// modules/masking.py, the mask blur and overlay of processing.py): resampling, the three resize
// modes, masks (luminance, blur, crop region) and the final paste-back. No LibTorch here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/types.h"
#include "io/png.h"

namespace fp8s {

// A single-channel 8-bit image (a mask: 255 = repaint).
struct GrayImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

enum class Filter { Nearest, Bilinear, Lanczos };

// Separable resampling with PIL's kernels and support scaling (Lanczos: a = 3), rounded to 8 bits.
RgbImage resize_rgb(const RgbImage& image, int width, int height, Filter filter = Filter::Lanczos);
GrayImage resize_gray(const GrayImage& image, int width, int height, Filter filter = Filter::Lanczos);

// A1111's resize modes to width x height: just resize; crop (scale to cover, centre crop); fill
// (scale to fit, centre, the empty bands filled with the image's stretched edge rows/columns).
RgbImage resize_to(const RgbImage& image, int width, int height, ResizeMode mode);
GrayImage resize_to(const GrayImage& image, int width, int height, ResizeMode mode);

// PIL's "L" conversion: L = (299 R + 587 G + 114 B) / 1000.
GrayImage luminance(const RgbImage& image);
GrayImage inverted(const GrayImage& mask);
// A1111's mask blur: a Gaussian of sigma `radius` with a kernel of 2·⌊2.5·radius + 0.5⌋ + 1 taps,
// horizontally then vertically, edges reflected (OpenCV's default); 0 leaves the mask as it is.
GrayImage blur_mask(const GrayImage& mask, int radius);

struct Rect {
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0;  // [x1, x2) x [y1, y2)
  int width() const { return x2 - x1; }
  int height() const { return y2 - y1; }
};
// masking.get_crop_region: the mask's non-zero bounding box grown by `padding`, inside the image.
// An empty mask gives the whole image.
Rect mask_crop_region(const GrayImage& mask, int padding);
// masking.expand_crop_region: grows `r` to the aspect ratio of width x height, inside image_w x image_h.
Rect expand_crop_region(Rect r, int width, int height, int image_w, int image_h);
RgbImage crop(const RgbImage& image, const Rect& r);
GrayImage crop(const GrayImage& mask, const Rect& r);
// `part` pasted into a copy of `image` at (x, y).
RgbImage paste(const RgbImage& image, const RgbImage& part, int x, int y);

// A1111's overlay: the original pixels where the (blurred) mask is 0, the generated ones where it
// is 255, alpha-blended between: out = (orig·(255 − m) + gen·m + 127) / 255.
RgbImage overlay_original(const RgbImage& generated, const RgbImage& original, const GrayImage& mask);

// masking.fill ("fill" inpainting): the masked area replaced by ever less blurred versions of the
// unmasked surroundings (premultiplied Gaussian blurs of radius 256, 64, 16, 4, 2, 0).
RgbImage fill_masked(const RgbImage& image, const GrayImage& mask);

}  // namespace fp8s
