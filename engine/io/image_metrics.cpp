#include "io/image_metrics.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace fp8s {
namespace {

void check_same_size(const RgbImage& a, const RgbImage& b) {
  if (a.width != b.width || a.height != b.height) {
    throw InputError("images of different sizes cannot be compared (" + std::to_string(a.width) + "x" +
                     std::to_string(a.height) + " vs " + std::to_string(b.width) + "x" +
                     std::to_string(b.height) + ")");
  }
}

std::vector<double> luminance(const RgbImage& img) {
  std::vector<double> y(static_cast<std::size_t>(img.width) * img.height);
  for (std::size_t i = 0; i < y.size(); ++i) {
    y[i] = 0.299 * img.pixels[3 * i] + 0.587 * img.pixels[3 * i + 1] + 0.114 * img.pixels[3 * i + 2];
  }
  return y;
}

// Separable Gaussian blur (11 taps, sigma 1.5), "valid" region only.
std::vector<double> blur_valid(const std::vector<double>& v, int w, int h, int* ow, int* oh) {
  static const std::array<double, 11> k = [] {
    std::array<double, 11> t{};
    double sum = 0;
    for (int i = 0; i < 11; ++i) sum += t[i] = std::exp(-((i - 5) * (i - 5)) / (2 * 1.5 * 1.5));
    for (auto& x : t) x /= sum;
    return t;
  }();
  *ow = w - 10;
  *oh = h - 10;
  std::vector<double> tmp(static_cast<std::size_t>(*ow) * h), out(static_cast<std::size_t>(*ow) * *oh);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < *ow; ++x) {
      double s = 0;
      for (int i = 0; i < 11; ++i) s += k[i] * v[static_cast<std::size_t>(y) * w + x + i];
      tmp[static_cast<std::size_t>(y) * *ow + x] = s;
    }
  }
  for (int y = 0; y < *oh; ++y) {
    for (int x = 0; x < *ow; ++x) {
      double s = 0;
      for (int i = 0; i < 11; ++i) s += k[i] * tmp[static_cast<std::size_t>(y + i) * *ow + x];
      out[static_cast<std::size_t>(y) * *ow + x] = s;
    }
  }
  return out;
}

// 5x7 glyphs, one byte per row, bit 4 = leftmost column.
const std::array<uint8_t, 7>* glyph(char c) {
  static const std::pair<char, std::array<uint8_t, 7>> font[] = {
      {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
      {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E}},
      {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
      {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
      {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
      {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
      {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
      {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
      {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
      {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
      {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
      {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
      {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
      {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
      {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
      {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
      {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
      {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
      {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}}, {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
      {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}}, {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
      {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}}, {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
      {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}}, {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
      {' ', {0, 0, 0, 0, 0, 0, 0}}};
  for (const auto& [ch, rows] : font) {
    if (ch == c) return &rows;
  }
  return nullptr;
}

void put(RgbImage& img, int x, int y, uint8_t r, uint8_t g, uint8_t b) {
  if (x < 0 || y < 0 || x >= img.width || y >= img.height) return;
  auto* p = &img.pixels[(static_cast<std::size_t>(y) * img.width + x) * 3];
  p[0] = r, p[1] = g, p[2] = b;
}

std::array<uint8_t, 3> colour_scale(double t) {
  // black -> blue -> red -> yellow -> white
  static const double stops[5][3] = {{0, 0, 0}, {0, 0, 255}, {255, 0, 0}, {255, 255, 0}, {255, 255, 255}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  std::array<uint8_t, 3> c{};
  for (int k = 0; k < 3; ++k) c[k] = static_cast<uint8_t>(std::lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k])));
  return c;
}

}  // namespace

double psnr(const RgbImage& a, const RgbImage& b) {
  check_same_size(a, b);
  double se = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) {
    const double d = double(a.pixels[i]) - b.pixels[i];
    se += d * d;
  }
  if (se == 0) return std::numeric_limits<double>::infinity();
  const double mse = se / a.pixels.size();
  return 10 * std::log10(255.0 * 255.0 / mse);
}

double ssim(const RgbImage& a, const RgbImage& b) {
  check_same_size(a, b);
  if (a.width < 11 || a.height < 11) throw InputError("SSIM needs images of at least 11x11 pixels");
  const auto x = luminance(a), y = luminance(b);
  std::vector<double> xx(x.size()), yy(x.size()), xy(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xx[i] = x[i] * x[i], yy[i] = y[i] * y[i], xy[i] = x[i] * y[i];
  int w = 0, h = 0;
  const auto mx = blur_valid(x, a.width, a.height, &w, &h), my = blur_valid(y, a.width, a.height, &w, &h);
  const auto sxx = blur_valid(xx, a.width, a.height, &w, &h), syy = blur_valid(yy, a.width, a.height, &w, &h);
  const auto sxy = blur_valid(xy, a.width, a.height, &w, &h);
  const double c1 = std::pow(0.01 * 255, 2), c2 = std::pow(0.03 * 255, 2);
  double sum = 0;
  for (std::size_t i = 0; i < mx.size(); ++i) {
    const double vx = sxx[i] - mx[i] * mx[i], vy = syy[i] - my[i] * my[i], cxy = sxy[i] - mx[i] * my[i];
    sum += ((2 * mx[i] * my[i] + c1) * (2 * cxy + c2)) / ((mx[i] * mx[i] + my[i] * my[i] + c1) * (vx + vy + c2));
  }
  return sum / mx.size();
}

int max_abs_diff(const RgbImage& a, const RgbImage& b) {
  check_same_size(a, b);
  int m = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) m = std::max(m, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
  return m;
}

void draw_text(RgbImage& img, int x, int y, const std::string& text, int scale, uint8_t r, uint8_t g, uint8_t b) {
  int cx = x;
  for (char raw : text) {
    const auto* rows = glyph(static_cast<char>(std::toupper(static_cast<unsigned char>(raw))));
    if (rows) {
      for (int row = 0; row < 7; ++row) {
        for (int col = 0; col < 5; ++col) {
          if (!((*rows)[row] & (0x10 >> col))) continue;
          for (int sy = 0; sy < scale; ++sy) {
            for (int sx = 0; sx < scale; ++sx) put(img, cx + col * scale + sx, y + row * scale + sy, r, g, b);
          }
        }
      }
    }
    cx += 6 * scale;
  }
}

RgbImage diff_heatmap(const RgbImage& a, const RgbImage& b) {
  check_same_size(a, b);
  const int m = std::max(1, max_abs_diff(a, b));
  const int bar = 30;
  RgbImage out;
  out.width = std::max(a.width, 200);
  out.height = a.height + bar;
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 255);
  for (int y = 0; y < a.height; ++y) {
    for (int x = 0; x < a.width; ++x) {
      const std::size_t i = (static_cast<std::size_t>(y) * a.width + x) * 3;
      int d = 0;
      for (int k = 0; k < 3; ++k) d = std::max(d, std::abs(int(a.pixels[i + k]) - int(b.pixels[i + k])));
      const auto c = colour_scale(double(d) / m);
      put(out, x, y, c[0], c[1], c[2]);
    }
  }
  // the colour scale bar from 0 to the maximum difference, with its end values
  for (int x = 0; x < out.width; ++x) {
    const auto c = colour_scale(double(x) / (out.width - 1));
    for (int y = a.height + 2; y < a.height + 12; ++y) put(out, x, y, c[0], c[1], c[2]);
  }
  draw_text(out, 2, a.height + 15, "0", 2, 0, 0, 0);
  const std::string max_label = std::to_string(m) + " LEVELS";
  draw_text(out, out.width - static_cast<int>(max_label.size()) * 12 - 2, a.height + 15, max_label, 2, 0, 0, 0);
  return out;
}

RgbImage side_by_side(const std::vector<RgbImage>& images, const std::vector<std::string>& labels) {
  if (images.empty()) throw InputError("side_by_side needs at least one image");
  const int gap = 8;
  // Each column is as wide as its image or its caption, whichever is wider.
  std::vector<int> widths, scales;
  int caption = 0;
  RgbImage out;
  out.width = 0;
  out.height = 0;
  for (std::size_t k = 0; k < images.size(); ++k) {
    const int scale = images[k].width >= 256 ? 2 : 1;
    const int text = k < labels.size() ? static_cast<int>(labels[k].size()) * 6 * scale + 4 : 0;
    scales.push_back(scale);
    widths.push_back(std::max(images[k].width, text));
    caption = std::max(caption, 7 * scale + 8);
    out.width += widths.back() + gap;
  }
  out.width -= gap;
  for (const auto& img : images) out.height = std::max(out.height, img.height + caption);
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 255);
  int x0 = 0;
  for (std::size_t k = 0; k < images.size(); ++k) {
    const auto& img = images[k];
    if (k < labels.size()) draw_text(out, x0 + 2, 4, labels[k], scales[k], 0, 0, 0);
    const int left = x0 + (widths[k] - img.width) / 2;
    for (int y = 0; y < img.height; ++y) {
      for (int x = 0; x < img.width; ++x) {
        const auto* p = &img.pixels[(static_cast<std::size_t>(y) * img.width + x) * 3];
        put(out, left + x, caption + y, p[0], p[1], p[2]);
      }
    }
    x0 += widths[k] + gap;
  }
  return out;
}

}  // namespace fp8s
