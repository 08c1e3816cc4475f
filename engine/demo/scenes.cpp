#include "demo/scenes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

namespace fp8s::demo {
namespace {

constexpr int kSuper = 4;  // supersampling per axis (anti-aliased edges)

// Inside-tests in shape-local coordinates (u, v) scaled so that the shape's radius is 1.
bool inside(int shape, double u, double v) {
  const double pi = 3.14159265358979323846;
  switch (shape) {
    case 0: return u * u + v * v <= 1.0;                                    // circle
    case 1: return std::abs(u) <= 0.82 && std::abs(v) <= 0.82;              // square
    case 2: {                                                               // triangle, apex up
      if (v > 0.75 || v < -1.0) return false;
      const double half = (v + 1.0) / 1.75 * 0.95;
      return std::abs(u) <= half;
    }
    case 3: {                                                               // five-pointed star
      const double r = std::sqrt(u * u + v * v);
      if (r > 1.0) return false;
      double a = std::atan2(u, -v);  // 0 at the top
      const double sector = 2 * pi / 5;
      a = std::fmod(a + 2 * pi + sector / 2, sector) - sector / 2;  // -36°..36° around the nearest tip
      const double inner = 0.45;
      // boundary: straight line between the tip (1, 0°) and the inner corner (inner, 36°)
      const double x0 = 1.0, y0 = 0.0, x1 = inner * std::cos(sector / 2), y1 = inner * std::sin(sector / 2);
      const double px = r * std::cos(std::abs(a)), py = r * std::sin(std::abs(a));
      const double cross = (x1 - x0) * (py - y0) - (y1 - y0) * (px - x0);
      return cross >= 0;  // on the centre's side of the tip-to-inner-corner edge
    }
    case 4: {                                                               // ring
      const double r2 = u * u + v * v;
      return r2 <= 1.0 && r2 >= 0.36;
    }
    case 5: return (std::abs(u) <= 0.3 && std::abs(v) <= 1.0) || (std::abs(v) <= 0.3 && std::abs(u) <= 1.0);  // cross
  }
  return false;
}

const char* const kPositionPhrase[] = {"in the centre",        "on the left",           "on the right",
                                       "at the top",           "at the bottom",         "in the top left corner",
                                       "in the top right corner", "in the bottom left corner", "in the bottom right corner"};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

int nearest_colour(double r, double g, double b) {
  int best = 0;
  double bd = 1e30;
  for (std::size_t i = 0; i < colours().size(); ++i) {
    const auto& c = colours()[i];
    const double d = (r - c.r) * (r - c.r) + (g - c.g) * (g - c.g) + (b - c.b) * (b - c.b);
    if (d < bd) {
      bd = d;
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace

const std::vector<NamedColour>& colours() {
  static const std::vector<NamedColour> c = {
      {"red", 220, 30, 30},    {"green", 40, 170, 50},  {"blue", 40, 70, 220},   {"yellow", 245, 215, 30},
      {"white", 245, 245, 245}, {"black", 20, 20, 20},   {"orange", 250, 140, 20}, {"purple", 140, 50, 180},
      {"pink", 250, 140, 200}, {"grey", 128, 128, 128}};
  return c;
}
const std::vector<std::string>& shapes() {
  static const std::vector<std::string> s = {"circle", "square", "triangle", "star", "ring", "cross"};
  return s;
}
const std::vector<std::string>& positions() {
  static const std::vector<std::string> p = {"centre", "left", "right", "top", "bottom", "top left", "top right", "bottom left", "bottom right"};
  return p;
}
const std::vector<std::string>& sizes() {
  static const std::vector<std::string> s = {"small", "large"};
  return s;
}

void position_centre(int position, int& x, int& y) {
  static const int cx[] = {32, 16, 48, 32, 32, 16, 48, 16, 48};
  static const int cy[] = {32, 32, 32, 16, 48, 16, 16, 48, 48};
  x = cx[position];
  y = cy[position];
}

int size_radius(int size) { return size == 0 ? 8 : 14; }

std::string caption(const Scene& s, const CaptionParts& parts) {
  auto noun = [&](const ShapeSpec& it, bool with_size) {
    std::string n = "a ";
    if (with_size) n += sizes()[static_cast<std::size_t>(it.size)] + " ";
    return n + colours()[static_cast<std::size_t>(it.colour)].name + " " + shapes()[static_cast<std::size_t>(it.shape)];
  };
  std::string c;
  if (s.items.size() == 2) {
    c = noun(s.items[0], false) + " to the left of " + noun(s.items[1], false);
  } else {
    c = noun(s.items[0], parts.size);
    if (parts.position) c += std::string(" ") + kPositionPhrase[s.items[0].position];
  }
  if (parts.background) c += std::string(" on a ") + colours()[static_cast<std::size_t>(s.background)].name + " background";
  return c;
}

RgbImage render(const Scene& s) {
  RgbImage img;
  img.width = img.height = kImageSize;
  img.pixels.resize(kImageSize * kImageSize * 3);
  const auto& bg = colours()[static_cast<std::size_t>(s.background)];
  struct Placed {
    int shape;
    double x, y, r;
    const NamedColour* colour;
  };
  std::vector<Placed> placed;
  for (std::size_t i = 0; i < s.items.size(); ++i) {
    const auto& it = s.items[i];
    int x, y;
    double r = size_radius(it.size);
    if (s.items.size() == 2) {  // relation scenes: left and right halves, medium size
      x = i == 0 ? 16 : 48;
      y = 32;
      r = 11;
    } else {
      position_centre(it.position, x, y);
    }
    placed.push_back({it.shape, x + s.dx + 0.5, y + s.dy + 0.5, r, &colours()[static_cast<std::size_t>(it.colour)]});
  }
  for (int py = 0; py < kImageSize; ++py) {
    for (int px = 0; px < kImageSize; ++px) {
      double acc[3] = {0, 0, 0};
      for (int sy = 0; sy < kSuper; ++sy) {
        for (int sx = 0; sx < kSuper; ++sx) {
          const double fx = px + (sx + 0.5) / kSuper, fy = py + (sy + 0.5) / kSuper;
          const NamedColour* c = &bg;
          for (const auto& p : placed) {
            if (inside(p.shape, (fx - p.x) / p.r, (fy - p.y) / p.r)) c = p.colour;
          }
          acc[0] += c->r;
          acc[1] += c->g;
          acc[2] += c->b;
        }
      }
      for (int k = 0; k < 3; ++k) {
        img.pixels[(py * kImageSize + px) * 3 + k] = static_cast<uint8_t>(std::lround(acc[k] / (kSuper * kSuper)));
      }
    }
  }
  return img;
}

bool is_held_out(const Scene& s) {
  if (s.items.size() != 1) return false;
  const auto& it = s.items[0];
  const uint64_t key = ((((static_cast<uint64_t>(it.shape) * 16 + it.colour) * 4 + it.size) * 16 + it.position) * 16) + s.background;
  return mix(key + 0x5eed) % 20 == 0;
}

std::vector<Scene> all_single_scenes() {
  std::vector<Scene> out;
  for (int shape = 0; shape < static_cast<int>(shapes().size()); ++shape)
    for (int colour = 0; colour < static_cast<int>(colours().size()); ++colour)
      for (int size = 0; size < 2; ++size)
        for (int position = 0; position < static_cast<int>(positions().size()); ++position)
          for (int bg = 0; bg < static_cast<int>(colours().size()); ++bg) {
            if (bg == colour) continue;
            Scene s;
            s.background = bg;
            s.items.push_back({shape, colour, size, position});
            out.push_back(s);
          }
  return out;
}

std::pair<Scene, std::string> sample_training(std::mt19937_64& rng) {
  auto pick = [&rng](std::size_t n) { return static_cast<int>(rng() % n); };
  const int nc = static_cast<int>(colours().size());
  while (true) {
    Scene s;
    s.background = pick(colours().size());
    CaptionParts parts;
    if (pick(5) == 0) {  // two shapes
      ShapeSpec a{pick(shapes().size()), pick(colours().size()), 1, 0}, b{pick(shapes().size()), pick(colours().size()), 1, 0};
      if (a.colour == s.background || b.colour == s.background) continue;
      s.items = {a, b};
    } else {
      s.items = {ShapeSpec{pick(shapes().size()), pick(colours().size()), pick(2), pick(positions().size())}};
      if (s.items[0].colour == s.background) continue;
      if (is_held_out(s)) continue;
      const int omit = pick(10);  // 70% full captions; the rest leave out one attribute
      parts.size = omit != 7;
      parts.position = omit != 8;
      parts.background = omit != 9;
    }
    s.dx = pick(5) - 2;
    s.dy = pick(5) - 2;
    (void)nc;
    return {s, caption(s, parts)};
  }
}

Reading read_image(const RgbImage& img) {
  Reading r;
  const int n = img.width;
  // background: the most common nearest named colour over the whole image (a shape covers at most
  // ~15% of it; a generated image's thin edge artifacts cannot outvote it)
  std::vector<int> votes(colours().size(), 0);
  auto px = [&](int x, int y, int k) { return static_cast<double>(img.pixels[(static_cast<std::size_t>(y) * n + x) * 3 + k]); };
  for (int y = 0; y < n; ++y) {
    for (int x = 0; x < n; ++x) ++votes[static_cast<std::size_t>(nearest_colour(px(x, y, 0), px(x, y, 1), px(x, y, 2)))];
  }
  r.background = static_cast<int>(std::max_element(votes.begin(), votes.end()) - votes.begin());
  const auto& bg = colours()[static_cast<std::size_t>(r.background)];
  // shape pixels: far from the background colour
  std::vector<uint8_t> mask(static_cast<std::size_t>(n * n), 0);
  double sx = 0, sy = 0, sr = 0, sg = 0, sb = 0;
  for (int y = 0; y < n; ++y) {
    for (int x = 0; x < n; ++x) {
      const double d = std::sqrt((px(x, y, 0) - bg.r) * (px(x, y, 0) - bg.r) + (px(x, y, 1) - bg.g) * (px(x, y, 1) - bg.g) +
                                 (px(x, y, 2) - bg.b) * (px(x, y, 2) - bg.b));
      if (d > 80) {
        mask[static_cast<std::size_t>(y * n + x)] = 1;
        ++r.pixels;
        sx += x + 0.5;
        sy += y + 0.5;
        sr += px(x, y, 0);
        sg += px(x, y, 1);
        sb += px(x, y, 2);
      }
    }
  }
  if (r.pixels < 12) return r;
  const double cx = sx / r.pixels, cy = sy / r.pixels;
  r.colour = nearest_colour(sr / r.pixels, sg / r.pixels, sb / r.pixels);
  double best = 1e30;
  for (int p = 0; p < static_cast<int>(positions().size()); ++p) {
    int x, y;
    position_centre(p, x, y);
    const double d = (x - cx) * (x - cx) + (y - cy) * (y - cy);
    if (d < best) {
      best = d;
      r.position = p;
    }
  }
  // shape and size: the template (every shape, both sizes, centred on the centroid) with the best IoU
  double best_iou = -1;
  for (int shape = 0; shape < static_cast<int>(shapes().size()); ++shape) {
    for (int size = 0; size < 2; ++size) {
      const double rad = size_radius(size);
      // the centroid of a triangle is below its box centre: search a few offsets
      for (int oy = -3; oy <= 3; ++oy) {
        int inter = 0, uni = 0;
        for (int y = 0; y < n; ++y) {
          for (int x = 0; x < n; ++x) {
            const bool t = inside(shape, (x + 0.5 - cx) / rad, (y + 0.5 - cy + oy) / rad);
            const bool m = mask[static_cast<std::size_t>(y * n + x)] != 0;
            inter += t && m;
            uni += t || m;
          }
        }
        const double iou = uni ? static_cast<double>(inter) / uni : 0;
        if (iou > best_iou) {
          best_iou = iou;
          r.shape = shape;
          r.size = size;
        }
      }
    }
  }
  return r;
}

Score score(const Scene& expected, const RgbImage& image) {
  const auto r = read_image(image);
  const auto& it = expected.items.at(0);
  Score s;
  s.background = r.background == expected.background;
  s.colour = r.colour == it.colour;
  s.shape = r.shape == it.shape;
  s.position = r.position == it.position;
  s.size = r.size == it.size;
  return s;
}

std::vector<std::string> grammar_words() {
  std::vector<std::string> w = {"a", "on", "the", "to", "of", "in", "at", "left", "right", "top", "bottom", "centre", "corner", "background"};
  for (const auto& c : colours()) w.push_back(c.name);
  for (const auto& s : shapes()) w.push_back(s);
  for (const auto& s : sizes()) w.push_back(s);
  return w;
}

}  // namespace fp8s::demo
