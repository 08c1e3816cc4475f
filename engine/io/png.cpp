#include "io/png.h"

#include <atomic>
#include <dirent.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "memory/process_memory.h"
#include "core/files.h"

namespace fp8s {
namespace {

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};

[[noreturn]] void png_error_handler(png_structp, png_const_charp msg) { throw RuntimeFailure(msg); }
void png_warning_handler(png_structp, png_const_charp) {}

}  // namespace

void make_dirs(const std::string& dir) {
  std::string partial;
  for (std::size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!partial.empty() && ::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        throw InputError("cannot create the output folder " + dir + " (" + std::strerror(errno) + ")");
      }
    }
    if (i < dir.size()) partial += dir[i];
  }
}

void check_writable_folder(const std::string& dir) {
  make_dirs(dir);
  std::string probe = (dir.empty() ? std::string(".") : dir) + "/.fp8studio-write-test-XXXXXX";
  std::vector<char> tmpl(probe.begin(), probe.end());
  tmpl.push_back('\0');
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) {
    throw InputError("the output folder " + dir + " is not writable (" + std::strerror(errno) +
                     "); choose another folder");
  }
  ::close(fd);
  ::unlink(tmpl.data());
}

namespace {
std::atomic<int> g_writes_in_flight{0};
}  // namespace

int png_writes_in_flight() { return g_writes_in_flight.load(); }

void write_png(const std::string& path, const RgbImage& image, const std::string& parameters) {
  struct InFlight {
    InFlight() { g_writes_in_flight.fetch_add(1); }
    ~InFlight() { g_writes_in_flight.fetch_sub(1); }
  } in_flight;
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<std::size_t>(image.width) * image.height * 3) {
    throw RuntimeFailure("write_png: image buffer does not match its size");
  }
  std::string temp = path + ".partial-XXXXXX";
  std::vector<char> tmpl(temp.begin(), temp.end());
  tmpl.push_back('\0');
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) {
    throw RuntimeFailure("cannot write " + path + " (" + std::strerror(errno) + ")");
  }
  temp = tmpl.data();
  ::fchmod(fd, 0644);
  std::unique_ptr<FILE, FileCloser> file(::fdopen(fd, "wb"));
  png_structp png = nullptr;
  png_infop info = nullptr;
  try {
    if (!file) throw RuntimeFailure("cannot write " + path);
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, png_error_handler, png_warning_handler);
    info = png ? png_create_info_struct(png) : nullptr;
    if (!png || !info) throw RuntimeFailure("libpng could not start");
    png_init_io(png, file.get());
    png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height),
                 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_text text{};
    if (!parameters.empty()) {
      text.compression = PNG_TEXT_COMPRESSION_NONE;
      text.key = const_cast<char*>("parameters");
      text.text = const_cast<char*>(parameters.c_str());
      text.text_length = parameters.size();
      png_set_text(png, info, &text, 1);
    }
    png_write_info(png, info);
    for (int y = 0; y < image.height; ++y) {
      png_write_row(png, const_cast<png_bytep>(image.pixels.data() + static_cast<std::size_t>(y) * image.width * 3));
    }
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    if (std::fflush(file.get()) != 0 || ::fsync(fileno(file.get())) != 0) {
      throw RuntimeFailure("writing " + path + " failed (" + std::strerror(errno) + ")");
    }
    file.reset();
    if (::link(temp.c_str(), path.c_str()) != 0) {
      throw RuntimeFailure("cannot create " + path + " (" + std::strerror(errno) + ")");
    }
    ::unlink(temp.c_str());
  } catch (const RuntimeFailure& e) {
    const int err = errno;  // libpng's "Write Error" does not say why: the failed fwrite's errno does
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
    file.reset();
    ::unlink(temp.c_str());
    std::string what = e.what();
    if (what == "Write Error" && err != 0) what += std::string(" (") + std::strerror(err) + ")";
    throw RuntimeFailure(what.find(path) == std::string::npos ? "writing " + path + " failed: " + what : what);
  }
}

std::string write_numbered_png(const std::string& folder, uint64_t seed, const RgbImage& image,
                               const std::string& parameters) {
  make_dirs(folder);
  for (int attempt = 0; attempt < 100; ++attempt) {
    long highest = 0;
    if (DIR* d = ::opendir(folder.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        const char* n = e->d_name;
        int digits = 0;
        while (n[digits] >= '0' && n[digits] <= '9') ++digits;
        if (digits == 5 && n[5] == '-') highest = std::max(highest, std::strtol(n, nullptr, 10));
      }
      ::closedir(d);
    }
    char name[64];
    std::snprintf(name, sizeof name, "%05ld-%llu.png", highest + 1, static_cast<unsigned long long>(seed));
    const std::string path = folder + "/" + name;
    if (::access(path.c_str(), F_OK) == 0) continue;
    try {
      write_png(path, image, parameters);
      return path;
    } catch (const RuntimeFailure&) {
      if (::access(path.c_str(), F_OK) == 0) continue;  // lost a race for the name: next number
      throw;
    }
  }
  throw RuntimeFailure("could not find a free file name in " + folder);
}

namespace {

// Where libpng reads from: a FILE, or bytes in memory (whose reader fails past the end).
struct MemorySource {
  const uint8_t* data;
  std::size_t size;
  std::size_t pos;
};
void read_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<MemorySource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "file ends early");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

// Decodes the PNG whose first 8 bytes (`sig`) were already read and checked, from `file` or
// `memory`. With `pixels` false the rows are decoded one at a time into one row's buffer and
// dropped (text chunks after the image data are still found), so a small file that claims a
// huge image costs no memory.
// libpng's own allocations (row buffers, zlib state, chunk data) are small for any image we accept;
// a chunk whose length field claims gigabytes must not get them (fuzzing found a 171-byte file that
// made libpng ask for 2 GB). Refused allocations become libpng's "out of memory" error.
constexpr std::size_t kPngMaxAllocation = 32u << 20;
png_voidp limited_malloc(png_structp, png_alloc_size_t n) {
  return n > kPngMaxAllocation ? nullptr : std::malloc(n);
}
void limited_free(png_structp, png_voidp p) { std::free(p); }

PngContents decode_png(FILE* file, MemorySource* memory, const std::string& label, bool pixels) {
  png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, nullptr, png_error_handler, png_warning_handler,
                                             nullptr, limited_malloc, limited_free);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw RuntimeFailure("libpng could not start");
  }
  PngContents out;
  try {
    if (file) {
      png_init_io(png, file);
    } else {
      png_set_read_fn(png, memory, read_memory);
    }
    png_set_sig_bytes(png, 8);
    png_set_user_limits(png, kPngMaxSide, kPngMaxSide);
    png_set_chunk_malloc_max(png, kPngMaxTextBytes);
    png_read_info(png, info);
    png_set_strip_16(png);
    png_set_palette_to_rgb(png);
    png_set_gray_to_rgb(png);
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_strip_alpha(png);
    if (png_get_interlace_type(png, info) != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int width = static_cast<int>(png_get_image_width(png, info));
    const int height = static_cast<int>(png_get_image_height(png, info));
    if (png_get_rowbytes(png, info) != static_cast<std::size_t>(width) * 3) {
      throw RuntimeFailure("unsupported PNG layout");
    }
    if (pixels && static_cast<uint64_t>(width) * static_cast<uint64_t>(height) > kPngMaxPixels) {
      // 780 KB of zeros can claim 16384² (805 MB of pixels, and each copy and resize more)
      throw InputError(label + ": a PNG of " + std::to_string(width) + "x" + std::to_string(height) +
                       " is more than the 64 megapixels this app decodes; downscale it (generation goes up to 4096x4096)");
    }
    if (pixels) {
      // sized against memory before decoding: its RGB bytes, and the float copies and resizes an
      // init image, a mask or a control hint makes of it (about 6 times as much)
      const uint64_t need = static_cast<uint64_t>(width) * static_cast<uint64_t>(height) * 3 * 7;
      const uint64_t free_bytes = available_memory_bytes();
      if (free_bytes > 0 && need > free_bytes) {
        throw InputError(label + ": a PNG of " + std::to_string(width) + "x" + std::to_string(height) + " needs about " +
                         std::to_string(need >> 20) + " MiB to decode and prepare, more than the " +
                         std::to_string(free_bytes >> 20) + " MiB free; downscale it or free memory");
      }
      out.image.width = width;
      out.image.height = height;
      out.image.pixels.resize(static_cast<std::size_t>(width) * height * 3);
      std::vector<png_bytep> rows(static_cast<std::size_t>(height));
      for (int y = 0; y < height; ++y) {
        rows[static_cast<std::size_t>(y)] = out.image.pixels.data() + static_cast<std::size_t>(y) * width * 3;
      }
      png_read_image(png, rows.data());
    } else if (png_get_interlace_type(png, info) == PNG_INTERLACE_NONE) {
      std::vector<uint8_t> row(static_cast<std::size_t>(width) * 3);
      for (int y = 0; y < height; ++y) png_read_row(png, row.data(), nullptr);
    }
    // an interlaced image without its pixels: de-interlacing needs them all, so only the text
    // before the image data is read
    if (pixels || png_get_interlace_type(png, info) == PNG_INTERLACE_NONE) png_read_end(png, info);
    png_textp texts = nullptr;
    int count = 0;
    png_get_text(png, info, &texts, &count);
    for (int i = 0; i < count; ++i) {
      if (std::strcmp(texts[i].key, "parameters") == 0) {
        out.parameters.assign(texts[i].text, texts[i].text_length);
      }
    }
  } catch (const RuntimeFailure& e) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw InputError(label + ": unreadable PNG (" + e.what() + ")");
  } catch (...) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw;
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return out;
}

PngContents read_png_file(const std::string& path, bool pixels) {
  refuse_special_file(path);
  std::unique_ptr<FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
  uint8_t sig[8] = {};
  if (std::fread(sig, 1, 8, file.get()) != 8 || png_sig_cmp(sig, 0, 8) != 0) {
    throw InputError(path + ": not a PNG file");
  }
  return decode_png(file.get(), nullptr, path, pixels);
}

}  // namespace

PngContents read_png(const std::string& path) { return read_png_file(path, true); }

std::string read_png_parameters(const std::string& path) { return read_png_file(path, false).parameters; }

std::string read_png_parameters(const uint8_t* data, std::size_t size, const std::string& label) {
  if (size < 8 || png_sig_cmp(data, 0, 8) != 0) throw InputError(label + ": not a PNG file");
  MemorySource memory{data, size, 8};
  return decode_png(nullptr, &memory, label, false).parameters;
}

}  // namespace fp8s
