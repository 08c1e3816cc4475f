// PNG files through libpng: RGB images with an A1111-compatible `parameters` text chunk, written
// atomically under numbered names that never overwrite, and read back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8s {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // row-major RGB, 3 bytes per pixel
};

// Encodes `image` as PNG with a tEXt chunk `parameters` (when not empty) into `path` through a
// temporary file in the same folder; refuses to replace an existing file. Throws RuntimeFailure
// (disk full, read-only folder) leaving no partial file.
void write_png(const std::string& path, const RgbImage& image, const std::string& parameters);
// PNG writes under way in this process (a process that must end now waits for them: every file
// is then whole or absent).
int png_writes_in_flight();

// Writes into `folder` as `NNNNN-SEED.png`, NNNNN one above the highest existing number.
// Creates the folder if needed. Returns the path written.
std::string write_numbered_png(const std::string& folder, uint64_t seed, const RgbImage& image,
                               const std::string& parameters);

struct PngContents {
  RgbImage image;
  std::string parameters;  // empty when the file has no `parameters` text
};
// Limits on what a PNG may claim: width and height, and the bytes of one (decompressed) text chunk.
constexpr uint32_t kPngMaxSide = 16384;
constexpr uint64_t kPngMaxPixels = 64ull << 20;  // the pixels decoded (8192x8192)
constexpr std::size_t kPngMaxTextBytes = 8u << 20;

// Reads an 8-bit RGB/RGBA/grey PNG (converted to RGB). Throws InputError for anything else.
PngContents read_png(const std::string& path);

// Only the `parameters` text (empty when absent), without keeping the pixels: what a PNG dropped on
// the window needs. The memory form reads `size` bytes at `data`; `label` names it in errors.
std::string read_png_parameters(const std::string& path);
std::string read_png_parameters(const uint8_t* data, std::size_t size, const std::string& label);

// Creates `dir` and its missing parents (mkdir -p). Throws InputError naming the folder.
void make_dirs(const std::string& dir);

// Creates `dir` if needed and checks that a file can be created in it (a temporary file, removed
// at once). Throws InputError naming the folder and the reason (read-only, permission, ...).
void check_writable_folder(const std::string& dir);

}  // namespace fp8s
