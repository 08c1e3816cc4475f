// The demo model's world: 64x64 scenes of one or two simple shapes on a plain background, their
// captions from a small grammar, the enumeration of attribute combinations with a held-out part,
// and a checker that reads a generated image back into attributes (issue 10).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "io/png.h"

namespace fp8s::demo {

constexpr int kImageSize = 64;

struct NamedColour {
  const char* name;
  uint8_t r, g, b;
};
const std::vector<NamedColour>& colours();            // 10 named colours
const std::vector<std::string>& shapes();             // circle, square, triangle, star, ring, cross
const std::vector<std::string>& positions();          // centre, left, right, top, bottom, 4 corners
const std::vector<std::string>& sizes();              // small, large

// One shape: indices into the tables above.
struct ShapeSpec {
  int shape = 0, colour = 0, size = 1, position = 0;
};

// A scene: one shape (optionally placed by position), or two shapes side by side (relation).
struct Scene {
  int background = 0;
  std::vector<ShapeSpec> items;   // one, or two for "A to the left of B"
  int dx = 0, dy = 0;             // jitter in pixels (training variety)
};

// Which words a caption states (the rest are left to chance in training).
struct CaptionParts {
  bool size = true, position = true, background = true;
};

std::string caption(const Scene& scene, const CaptionParts& parts = {});
RgbImage render(const Scene& scene);
// Centre of a position (pixels) and radius of a size class.
void position_centre(int position, int& x, int& y);
int size_radius(int size);

// Every single-shape scene with all attributes stated (background != shape colour); a fixed 5%
// of them is held out of training.
std::vector<Scene> all_single_scenes();
bool is_held_out(const Scene& scene);

// A random training scene and caption (never a held-out combination), deterministic in `rng`.
std::pair<Scene, std::string> sample_training(std::mt19937_64& rng);

// What an image shows, read back for a single-shape scene.
struct Reading {
  int background = -1, colour = -1, shape = -1, position = -1, size = -1;
  int pixels = 0;  // shape pixels found
};
Reading read_image(const RgbImage& image);

struct Score {
  bool colour = false, shape = false, position = false, background = false, size = false;
  bool all() const { return colour && shape && position && background; }
};
Score score(const Scene& expected, const RgbImage& image);

// The words of the grammar (for the demo vocabulary).
std::vector<std::string> grammar_words();

}  // namespace fp8s::demo
