// Page-locked host memory for the streaming transport, without the caching host allocator: its
// pin_memory() rounds every block up to a power of two (Flux FP16's 132 MB linear1 pins 256 MiB)
// and never returns them. Here the existing pageable tensors are registered in place, byte for
// byte, up to a cap; past the cap, or where registering fails, they stay pageable (slower copies,
// never an out-of-memory error that reads like a VRAM problem) and the log says so once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fp8s {

class HostPinning {
 public:
  using Register = std::function<bool(void*, std::size_t)>;
  using Unregister = std::function<void(void*)>;
  HostPinning(uint64_t cap, Register reg, Unregister unreg);
  ~HostPinning();  // unregisters everything it registered
  HostPinning(const HostPinning&) = delete;
  HostPinning& operator=(const HostPinning&) = delete;

  // Registers [data, data + bytes) if it fits under the cap; false: it stays pageable.
  bool pin(void* data, std::size_t bytes);
  uint64_t pinned_bytes() const { return pinned_; }
  uint64_t pageable_bytes() const { return pageable_; }
  uint64_t cap() const { return cap_; }
  // "" when everything was pinned, else why some was not (the cap, or a failed registration).
  const std::string& fallback() const { return fallback_; }

 private:
  uint64_t cap_;
  Register register_;
  Unregister unregister_;
  std::vector<void*> registered_;
  uint64_t pinned_ = 0, pageable_ = 0;
  std::string fallback_;
};

// The most host memory the streaming transport pins: $FP8S_PIN_LIMIT (a size; 0 turns pinning off),
// else half of the memory available now (what the host can spare beside the rest of the process).
uint64_t default_pin_cap();

}  // namespace fp8s
