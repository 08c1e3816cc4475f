// Image comparison: PSNR, SSIM (luminance, 11x11 Gaussian window), max difference, a difference
// heat map with a colour scale, and labelled side-by-side montages.
#pragma once

#include <string>
#include <vector>

#include "io/png.h"

namespace fp8s {

double psnr(const RgbImage& a, const RgbImage& b);   // dB over RGB, 8-bit peak; inf when equal
double ssim(const RgbImage& a, const RgbImage& b);   // on Y = 0.299R + 0.587G + 0.114B
int max_abs_diff(const RgbImage& a, const RgbImage& b);
// Per-pixel max |Δ| over channels mapped through a colour scale (black, blue, red, yellow, white),
// with the scale bar and its range (0 .. max) drawn below.
RgbImage diff_heatmap(const RgbImage& a, const RgbImage& b);
// Images next to each other with a caption bar above each.
RgbImage side_by_side(const std::vector<RgbImage>& images, const std::vector<std::string>& labels);
// Draws upper-case text (A-Z, 0-9, space and - . : ( ) / % +) with a 5x7 font scaled by `scale`.
void draw_text(RgbImage& img, int x, int y, const std::string& text, int scale, uint8_t r, uint8_t g,
               uint8_t b);

}  // namespace fp8s
