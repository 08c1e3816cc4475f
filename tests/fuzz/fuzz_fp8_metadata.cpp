// libFuzzer target: the description of FP8 files written by other tools (models/fp8_files.cpp)
// over any parsed safetensors header: scale spellings and shapes, the scaled_fp8 marker, per-layer
// `.comfy_quant` JSON and the `_quantization_metadata` header entry. Every input either gives a
// scheme whose counts hold together, or is refused with InputError.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/fp8_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto index = fp8s::parse_safetensors(data, size, size, "fuzz");
    const uint64_t data_begin = 8 + index.header_bytes;
    const auto bytes = [&](const fp8s::TensorRecord& r) {
      // the parser keeps every record inside the data area
      if (data_begin + r.end > size) std::abort();
      return std::vector<uint8_t>(data + data_begin + r.begin, data + data_begin + r.end);
    };
    const auto scheme = fp8s::read_fp8_scheme(index, bytes, "fuzz");
    if (scheme.fp8_tensors > index.tensors.size() || scheme.scaled_weights > scheme.fp8_tensors ||
        scheme.channel_scaled > scheme.scaled_weights) {
      std::abort();
    }
    if (scheme.fp8_tensors > 0 && scheme.layout.empty()) std::abort();
  } catch (const fp8s::InputError&) {
  }
  return 0;
}
