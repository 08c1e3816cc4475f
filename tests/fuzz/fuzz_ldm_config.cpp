// libFuzzer target: a checkpoint's `ldm.config` metadata (issue 54, class 1: zero heads once raised
// SIGFPE, an empty VAE ch_mult SIGSEGV, absurd widths allocated until the machine ran out). Every
// configuration the parser accepts is built on paper, as the engine builds it before reading a
// weight: its checkpoint layout, whose every tensor has a positive shape and whose size is bounded.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "models/checkpoint_layout.h"
#include "models/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fp8s::ModelConfig config;
  try {
    config = fp8s::parse_ldm_config(text, "fuzz.safetensors");
  } catch (const fp8s::InputError&) {
    return 0;  // refused with a message: what the engine reports
  }
  const auto layout = fp8s::checkpoint_layout(config, fp8s::Dtype::F16);
  if (layout.empty() || layout.size() > 1000000) std::abort();
  for (const auto& e : layout) {
    if (e.shape.empty() && !e.is_integer()) continue;  // scalars (EMA decay, logit scale)
    uint64_t n = 1;
    for (const int64_t d : e.shape) {
      if (d <= 0 || d > (int64_t{1} << 31)) std::abort();
      n *= static_cast<uint64_t>(d);
      if (n > (uint64_t{1} << 40)) std::abort();  // one tensor beyond 2^40 elements: not a bound at all
    }
  }
  return 0;
}
