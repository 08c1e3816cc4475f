#include "demo/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>
#include <vector>

#include "io/image_metrics.h"
#include "io/png.h"

namespace fp8s::demo {
namespace {

// loss.csv's rows keyed by (phase, step): a run resumed from an earlier checkpoint repeats steps,
// the last wins.
std::map<std::pair<std::string, int>, double> read_losses(const std::string& csv_path) {
  std::ifstream in(csv_path);
  std::string line;
  std::getline(in, line);  // header
  std::map<std::pair<std::string, int>, double> by_step;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string phase, step, loss;
    std::getline(ss, phase, ',');
    std::getline(ss, step, ',');
    std::getline(ss, loss, ',');
    try {
      by_step[{phase, std::stoi(step)}] = std::stod(loss);
    } catch (...) {
    }
  }
  return by_step;
}

}  // namespace

// The loss curves as a PNG: log10(loss) against step; VAE blue, UNet orange, decoder green.
void plot_losses(const std::string& csv_path, const std::string& png_path) {
  const auto by_step = read_losses(csv_path);
  if (by_step.empty()) return;
  std::vector<std::tuple<std::string, int, double>> rows;
  for (const auto& [key, loss] : by_step) rows.emplace_back(key.first, key.second, loss);
  const int w = 640, h = 360, left = 60, right = 20, top = 30, bottom = 40;
  RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.assign(static_cast<std::size_t>(w * h * 3), 255);
  auto put = [&](int x, int y, uint8_t r, uint8_t g, uint8_t b) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    auto* p = &img.pixels[static_cast<std::size_t>((y * w + x) * 3)];
    p[0] = r;
    p[1] = g;
    p[2] = b;
  };
  // the phases share the x axis, each in its own band: autoencoder, text encoder + UNet, decoder
  struct Band {
    const char* phase;
    const char* label;
    double from, to;
    uint8_t r, g, b;
    int max_step = 0;
  };
  Band bands[] = {{"vae", "VAE", 0.0, 0.2, 31, 119, 180},
                  {"unet", "UNET + TEXT", 0.2, 0.85, 230, 85, 13},
                  {"decoder", "DECODER", 0.85, 1.0, 44, 160, 44}};
  double lo = 1e30, hi = -1e30;
  for (const auto& [phase, step, loss] : rows) {
    const double l = std::log10(std::max(loss, 1e-6));
    lo = std::min(lo, l);
    hi = std::max(hi, l);
    for (auto& band : bands) {
      if (phase == band.phase) band.max_step = std::max(band.max_step, step);
    }
  }
  if (hi - lo < 1e-3) hi = lo + 1;
  for (int x = left; x < w - right; ++x) put(x, h - bottom, 0, 0, 0);
  for (int y = top; y <= h - bottom; ++y) put(left, y, 0, 0, 0);
  for (const auto& band : bands) {
    if (band.max_step == 0) continue;
    int px = -1, py = -1;
    for (const auto& [phase, step, loss] : rows) {
      if (phase != band.phase) continue;
      const double fx = band.from + (band.to - band.from) * step / band.max_step;
      const int x = left + static_cast<int>(fx * (w - left - right));
      const int y = top + static_cast<int>((hi - std::log10(std::max(loss, 1e-6))) / (hi - lo) * (h - top - bottom));
      if (px >= 0) {
        const int n = std::max(std::abs(x - px), std::abs(y - py)) + 1;
        for (int i = 0; i <= n; ++i) put(px + (x - px) * i / n, py + (y - py) * i / n, band.r, band.g, band.b);
      }
      px = x;
      py = y;
    }
    char label[64];
    std::snprintf(label, sizeof label, "%s %d", band.label, band.max_step);
    draw_text(img, left + static_cast<int>(band.from * (w - left - right)) + 4, h - bottom + 10, label, 1, band.r, band.g, band.b);
  }
  draw_text(img, left, 8, "LOSS (LOG10) PER PHASE - STEPS BELOW", 2, 0, 0, 0);
  char label[64];
  std::snprintf(label, sizeof label, "%.3f", std::pow(10.0, hi));
  draw_text(img, 2, top, label, 1, 0, 0, 0);
  std::snprintf(label, sizeof label, "%.3f", std::pow(10.0, lo));
  draw_text(img, 2, h - bottom - 8, label, 1, 0, 0, 0);
  std::filesystem::remove(png_path);
  write_png(png_path, img, "");
}

}  // namespace fp8s::demo
