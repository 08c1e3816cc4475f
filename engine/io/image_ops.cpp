#include "io/image_ops.h"

#include <algorithm>
#include <cmath>

namespace fp8s {
namespace {

constexpr double kPi = 3.14159265358979323846;

double sinc(double x) {
  if (x == 0) return 1;
  x *= kPi;
  return std::sin(x) / x;
}

double kernel(Filter f, double x) {
  x = std::fabs(x);
  switch (f) {
    case Filter::Nearest: return x < 0.5 ? 1 : 0;
    case Filter::Bilinear: return x < 1 ? 1 - x : 0;
    case Filter::Lanczos: return x < 3 ? sinc(x) * sinc(x / 3) : 0;
  }
  return 0;
}

double support(Filter f) { return f == Filter::Lanczos ? 3 : f == Filter::Bilinear ? 1 : 0.5; }

// PIL's precomputed coefficients for one axis: output i reads inputs [first[i], first[i] + n).
struct Taps {
  std::vector<int> first;
  std::vector<std::vector<double>> weights;
};

Taps taps(int in, int out, Filter f) {
  Taps t;
  const double scale = static_cast<double>(in) / out;
  const double fscale = std::max(scale, 1.0);
  const double sup = support(f) * fscale;
  for (int i = 0; i < out; ++i) {
    const double centre = (i + 0.5) * scale;
    int x0 = std::max(0, static_cast<int>(std::floor(centre - sup + 0.5)));
    int x1 = std::min(in, static_cast<int>(std::floor(centre + sup + 0.5)));
    if (f == Filter::Nearest) {
      x0 = std::min(in - 1, static_cast<int>(centre));
      x1 = x0 + 1;
    }
    std::vector<double> w;
    double sum = 0;
    for (int x = x0; x < x1; ++x) {
      const double v = f == Filter::Nearest ? 1 : kernel(f, (x - centre + 0.5) / fscale);
      w.push_back(v);
      sum += v;
    }
    if (sum != 0) {
      for (double& v : w) v /= sum;
    }
    t.first.push_back(x0);
    t.weights.push_back(std::move(w));
  }
  return t;
}

uint8_t clamp8(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0l, 255l)); }

// Resamples `channels`-interleaved 8-bit pixels (rows, then columns, through a double buffer).
std::vector<uint8_t> resample(const std::vector<uint8_t>& src, int w, int h, int channels, int ow, int oh, Filter f) {
  const Taps tx = taps(w, ow, f), ty = taps(h, oh, f);
  std::vector<double> mid(static_cast<std::size_t>(ow) * h * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < ow; ++x) {
      for (int c = 0; c < channels; ++c) {
        double acc = 0;
        const auto& wt = tx.weights[x];
        for (std::size_t k = 0; k < wt.size(); ++k) {
          acc += wt[k] * src[(static_cast<std::size_t>(y) * w + tx.first[x] + k) * channels + c];
        }
        mid[(static_cast<std::size_t>(y) * ow + x) * channels + c] = acc;
      }
    }
  }
  std::vector<uint8_t> out(static_cast<std::size_t>(ow) * oh * channels);
  for (int y = 0; y < oh; ++y) {
    const auto& wt = ty.weights[y];
    for (int x = 0; x < ow; ++x) {
      for (int c = 0; c < channels; ++c) {
        double acc = 0;
        for (std::size_t k = 0; k < wt.size(); ++k) {
          acc += wt[k] * mid[((ty.first[y] + k) * ow + x) * channels + c];
        }
        out[(static_cast<std::size_t>(y) * ow + x) * channels + c] = clamp8(acc);
      }
    }
  }
  return out;
}

template <class Image>
Image make(int w, int h, int channels) {
  Image im;
  im.width = w;
  im.height = h;
  im.pixels.assign(static_cast<std::size_t>(w) * h * channels, 0);
  return im;
}

template <class Image>
Image crop_any(const Image& im, const Rect& r, int channels) {
  Image out = make<Image>(r.width(), r.height(), channels);
  for (int y = 0; y < r.height(); ++y) {
    const auto* row = &im.pixels[(static_cast<std::size_t>(y + r.y1) * im.width + r.x1) * channels];
    std::copy(row, row + static_cast<std::ptrdiff_t>(r.width()) * channels,
              &out.pixels[static_cast<std::size_t>(y) * r.width() * channels]);
  }
  return out;
}

template <class Image>
void paste_into(Image& dst, const Image& part, int x0, int y0, int channels) {
  for (int y = 0; y < part.height; ++y) {
    const int dy = y + y0;
    if (dy < 0 || dy >= dst.height) continue;
    for (int x = 0; x < part.width; ++x) {
      const int dx = x + x0;
      if (dx < 0 || dx >= dst.width) continue;
      for (int c = 0; c < channels; ++c) {
        dst.pixels[(static_cast<std::size_t>(dy) * dst.width + dx) * channels + c] =
            part.pixels[(static_cast<std::size_t>(y) * part.width + x) * channels + c];
      }
    }
  }
}

template <class Image>
Image resize_any(const Image& im, int w, int h, int channels, Filter f) {
  Image out = make<Image>(w, h, channels);
  if (im.width == w && im.height == h) return im;
  out.pixels = resample(im.pixels, im.width, im.height, channels, w, h, f);
  return out;
}

// images.resize_image (modes 0, 1, 2) for any channel count.
template <class Image>
Image resize_mode_any(const Image& im, int w, int h, ResizeMode mode, int channels) {
  auto resize = [&](const Image& i, int rw, int rh) { return resize_any(i, std::max(1, rw), std::max(1, rh), channels, Filter::Lanczos); };
  if (mode == ResizeMode::JustResize) return resize(im, w, h);
  const double ratio = static_cast<double>(w) / h;
  const double src_ratio = static_cast<double>(im.width) / im.height;
  const bool wider = mode == ResizeMode::Crop ? ratio > src_ratio : ratio < src_ratio;
  const int src_w = wider ? w : im.width * h / im.height;
  const int src_h = wider ? im.height * w / im.width : h;
  const Image resized = resize(im, src_w, src_h);
  Image out = make<Image>(w, h, channels);
  paste_into(out, resized, w / 2 - src_w / 2, h / 2 - src_h / 2, channels);
  if (mode == ResizeMode::Fill) {
    // the bands beside the pasted image repeat its edge rows (or columns)
    if (ratio < src_ratio) {
      const int top = h / 2 - src_h / 2, bottom = top + src_h;
      for (int y = 0; y < h; ++y) {
        if (y >= top && y < bottom) continue;
        const int from = std::clamp(y < top ? top : bottom - 1, 0, h - 1);
        std::copy_n(&out.pixels[static_cast<std::size_t>(from) * w * channels], static_cast<std::size_t>(w) * channels,
                    &out.pixels[static_cast<std::size_t>(y) * w * channels]);
      }
    } else if (ratio > src_ratio) {
      const int left = w / 2 - src_w / 2, right = left + src_w;
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          if (x >= left && x < right) continue;
          const int from = std::clamp(x < left ? left : right - 1, 0, w - 1);
          for (int c = 0; c < channels; ++c) {
            out.pixels[(static_cast<std::size_t>(y) * w + x) * channels + c] =
                out.pixels[(static_cast<std::size_t>(y) * w + from) * channels + c];
          }
        }
      }
    }
  }
  return out;
}

// A Gaussian of `radius` over premultiplied float RGBA (fill_masked) as three box blurs per axis
// (running sums: the cost does not grow with the radius), edges clamped.
void blur_rgba(std::vector<float>& px, int w, int h, double radius) {
  if (radius <= 0) return;
  const int half = std::max(1, static_cast<int>(std::lround((std::sqrt(4.0 * radius * radius + 1) - 1) / 2)));
  std::vector<float> line;
  auto box = [&](int n, auto at) {  // one box pass over a line of n pixels, `at(i)` -> float* (4)
    line.assign(static_cast<std::size_t>(n) * 4, 0.0f);
    for (int c = 0; c < 4; ++c) {
      double sum = 0;
      for (int i = -half; i <= half; ++i) sum += at(std::clamp(i, 0, n - 1))[c];
      for (int i = 0; i < n; ++i) {
        line[static_cast<std::size_t>(i) * 4 + c] = static_cast<float>(sum / (2 * half + 1));
        sum += at(std::min(i + half + 1, n - 1))[c] - at(std::max(i - half, 0))[c];
      }
    }
    for (int i = 0; i < n; ++i) std::copy_n(&line[static_cast<std::size_t>(i) * 4], 4, at(i));
  };
  for (int pass = 0; pass < 3; ++pass) {
    for (int y = 0; y < h; ++y) box(w, [&](int x) { return &px[(static_cast<std::size_t>(y) * w + x) * 4]; });
    for (int x = 0; x < w; ++x) box(h, [&](int y) { return &px[(static_cast<std::size_t>(y) * w + x) * 4]; });
  }
}

}  // namespace

RgbImage resize_rgb(const RgbImage& image, int width, int height, Filter filter) {
  return resize_any(image, width, height, 3, filter);
}
GrayImage resize_gray(const GrayImage& image, int width, int height, Filter filter) {
  return resize_any(image, width, height, 1, filter);
}
RgbImage resize_to(const RgbImage& image, int width, int height, ResizeMode mode) {
  return resize_mode_any(image, width, height, mode, 3);
}
GrayImage resize_to(const GrayImage& image, int width, int height, ResizeMode mode) {
  return resize_mode_any(image, width, height, mode, 1);
}

GrayImage luminance(const RgbImage& image) {
  GrayImage g = make<GrayImage>(image.width, image.height, 1);
  for (std::size_t i = 0; i < g.pixels.size(); ++i) {
    const uint32_t r = image.pixels[3 * i], gr = image.pixels[3 * i + 1], b = image.pixels[3 * i + 2];
    g.pixels[i] = static_cast<uint8_t>((r * 299 + gr * 587 + b * 114) / 1000);
  }
  return g;
}

GrayImage inverted(const GrayImage& mask) {
  GrayImage out = mask;
  for (auto& v : out.pixels) v = static_cast<uint8_t>(255 - v);
  return out;
}

GrayImage blur_mask(const GrayImage& mask, int radius) {
  if (radius <= 0) return mask;
  const int size = 2 * static_cast<int>(2.5 * radius + 0.5) + 1, half = size / 2;
  std::vector<double> kern(static_cast<std::size_t>(size));
  double sum = 0;
  for (int i = 0; i < size; ++i) sum += kern[static_cast<std::size_t>(i)] = std::exp(-0.5 * (i - half) * (i - half) / (double(radius) * radius));
  for (double& v : kern) v /= sum;
  auto reflect = [](int i, int n) {  // BORDER_REFLECT_101: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
    return i;
  };
  const int w = mask.width, h = mask.height;
  std::vector<double> mid(mask.pixels.size());
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double acc = 0;
      for (int i = 0; i < size; ++i) acc += kern[static_cast<std::size_t>(i)] * mask.pixels[static_cast<std::size_t>(y) * w + reflect(x + i - half, w)];
      mid[static_cast<std::size_t>(y) * w + x] = acc;
    }
  }
  GrayImage out = mask;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double acc = 0;
      for (int i = 0; i < size; ++i) acc += kern[static_cast<std::size_t>(i)] * mid[static_cast<std::size_t>(reflect(y + i - half, h)) * w + x];
      out.pixels[static_cast<std::size_t>(y) * w + x] = clamp8(acc);
    }
  }
  return out;
}

Rect mask_crop_region(const GrayImage& mask, int padding) {
  int x1 = mask.width, y1 = mask.height, x2 = -1, y2 = -1;
  for (int y = 0; y < mask.height; ++y) {
    for (int x = 0; x < mask.width; ++x) {
      if (!mask.pixels[static_cast<std::size_t>(y) * mask.width + x]) continue;
      x1 = std::min(x1, x), y1 = std::min(y1, y), x2 = std::max(x2, x), y2 = std::max(y2, y);
    }
  }
  if (x2 < 0) return {0, 0, mask.width, mask.height};
  return {std::max(x1 - padding, 0), std::max(y1 - padding, 0), std::min(x2 + 1 + padding, mask.width),
          std::min(y2 + 1 + padding, mask.height)};
}

Rect expand_crop_region(Rect r, int width, int height, int image_w, int image_h) {
  const double ratio_crop = static_cast<double>(r.width()) / r.height();
  const double ratio_proc = static_cast<double>(width) / height;
  // grows [lo, hi) to `desired`, shifted back inside [0, limit)
  auto grow = [](int& lo, int& hi, int desired, int limit) {
    const int diff = desired - (hi - lo);
    lo -= diff / 2;
    hi += diff - diff / 2;
    if (hi >= limit) lo -= hi - limit, hi = limit;
    if (lo < 0) hi -= lo, lo = 0;
    hi = std::min(hi, limit);
  };
  if (ratio_crop > ratio_proc) {  // wider than the output: grow the height
    grow(r.y1, r.y2, static_cast<int>(r.width() / ratio_proc), image_h);
  } else {
    grow(r.x1, r.x2, static_cast<int>(r.height() * ratio_proc), image_w);
  }
  return r;
}

RgbImage crop(const RgbImage& image, const Rect& r) { return crop_any(image, r, 3); }
GrayImage crop(const GrayImage& mask, const Rect& r) { return crop_any(mask, r, 1); }

RgbImage paste(const RgbImage& image, const RgbImage& part, int x, int y) {
  RgbImage out = image;
  paste_into(out, part, x, y, 3);
  return out;
}

RgbImage overlay_original(const RgbImage& generated, const RgbImage& original, const GrayImage& mask) {
  RgbImage out = generated;
  for (std::size_t i = 0; i < mask.pixels.size(); ++i) {
    const uint32_t m = mask.pixels[i];
    for (int c = 0; c < 3; ++c) {
      const uint32_t o = original.pixels[3 * i + c], g = generated.pixels[3 * i + c];
      out.pixels[3 * i + c] = static_cast<uint8_t>((o * (255 - m) + g * m + 127) / 255);
    }
  }
  return out;
}

RgbImage fill_masked(const RgbImage& image, const GrayImage& mask) {
  const int w = image.width, h = image.height;
  const std::size_t n = static_cast<std::size_t>(w) * h;
  std::vector<float> masked(n * 4);  // premultiplied RGBA of the unmasked pixels
  for (std::size_t i = 0; i < n; ++i) {
    const float a = (255 - mask.pixels[i]) / 255.0f;
    for (int c = 0; c < 3; ++c) masked[4 * i + c] = image.pixels[3 * i + c] * a;
    masked[4 * i + 3] = a;
  }
  std::vector<float> acc(n * 4, 0.0f);  // composited result, premultiplied
  const std::pair<double, int> passes[] = {{256, 1}, {64, 1}, {16, 2}, {4, 4}, {2, 2}, {0, 1}};
  for (const auto& [radius, repeats] : passes) {
    auto blurred = masked;
    blur_rgba(blurred, w, h, radius);
    for (int r = 0; r < repeats; ++r) {
      for (std::size_t i = 0; i < n; ++i) {  // "over" compositing of premultiplied colour
        const float a = std::clamp(blurred[4 * i + 3], 0.0f, 1.0f);
        for (int c = 0; c < 4; ++c) acc[4 * i + c] = blurred[4 * i + c] + acc[4 * i + c] * (1 - a);
      }
    }
  }
  RgbImage out = image;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = acc[4 * i + 3];
    for (int c = 0; c < 3; ++c) out.pixels[3 * i + c] = a > 0 ? clamp8(acc[4 * i + c] / a) : 0;
  }
  return out;
}

}  // namespace fp8s
