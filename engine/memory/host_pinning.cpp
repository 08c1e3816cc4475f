#include "memory/host_pinning.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

#include "memory/process_memory.h"

namespace fp8s {

HostPinning::HostPinning(uint64_t cap, Register reg, Unregister unreg)
    : cap_(cap), register_(std::move(reg)), unregister_(std::move(unreg)) {}

HostPinning::~HostPinning() {
  for (void* p : registered_) unregister_(p);
}

bool HostPinning::pin(void* data, std::size_t bytes) {
  if (bytes == 0) return true;
  if (pinned_ + bytes > cap_) {
    pageable_ += bytes;
    if (fallback_.empty()) fallback_ = "the pinning cap";
    return false;
  }
  if (!register_(data, bytes)) {
    pageable_ += bytes;
    fallback_ = "page-locking failed";
    return false;
  }
  registered_.push_back(data);
  pinned_ += bytes;
  return true;
}

uint64_t default_pin_cap() {
  if (const char* e = std::getenv("FP8S_PIN_LIMIT"); e && *e) {
    if (std::string(e) == "0") return 0;
    return memory_size_bytes(e, "FP8S_PIN_LIMIT");
  }
  return available_memory_bytes() / 2;
}

}  // namespace fp8s
