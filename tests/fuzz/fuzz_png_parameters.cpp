// libFuzzer target: the PNG `parameters` reader (libpng with our limits) and A1111 infotext parsing,
// as a PNG dropped on the window goes through them; a parsed request is checked like a typed one.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/png.h"
#include "pipeline/infotext.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text;
  try {
    text = fp8s::read_png_parameters(data, size, "fuzz.png");
  } catch (const fp8s::InputError&) {
    // not a PNG: the same bytes as infotext (a pasted text) exercise the parser directly
    text.assign(reinterpret_cast<const char*>(data), size);
  }
  if (text.size() > fp8s::kPngMaxTextBytes) std::abort();
  try {
    const auto r = fp8s::parse_infotext(text);
    try {
      fp8s::validate_request(r, 512);
    } catch (const fp8s::InputError&) {
    }
    // what we write we must read back the same
    const auto again = fp8s::parse_infotext(fp8s::format_infotext(r, 1, "m", "", r.width, r.height));
    if (again.steps != r.steps || again.sampler != r.sampler || again.clip_skip != r.clip_skip) std::abort();
  } catch (const fp8s::InputError&) {
  }
  return 0;
}
