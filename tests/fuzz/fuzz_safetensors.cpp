// libFuzzer target: the safetensors header parser and layout validation (io/safetensors.cpp).
// Every input either parses into a layout whose invariants hold, or is refused with InputError.
#include <cstdint>
#include <cstdlib>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace {

void check(const fp8s::SafetensorsIndex& index, uint64_t file_size) {
  uint64_t previous_end = 0;
  std::set<std::string> names;
  for (const auto& t : index.tensors) {
    // ordered, inside the data area, sized exactly by shape x dtype, unique names
    if (t.begin < previous_end || t.end < t.begin || t.end > index.data_bytes) std::abort();
    if (t.numel() * fp8s::dtype_size(t.dtype) != t.nbytes()) std::abort();
    if (!names.insert(t.name).second) std::abort();
    previous_end = t.end;
  }
  if (8 + index.header_bytes + index.data_bytes > file_size) std::abort();
}

void parse(const uint8_t* data, size_t size, uint64_t file_size) {
  try {
    check(fp8s::parse_safetensors(data, size, file_size, "fuzz"), file_size);
  } catch (const fp8s::InputError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parse(data, size, size);
  // a file longer than what was read: the header must still lie inside the bytes given
  parse(data, size, size + 4096);
  return 0;
}
