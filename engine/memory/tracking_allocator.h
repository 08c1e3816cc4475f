// A CPU allocator that counts live and peak tensor bytes, installed over LibTorch's default with
// c10::SetCPUAllocator (docs/architecture.md, "Memory"). The only global besides the logger.
#pragma once

#include <cstdint>

namespace fp8s {

struct TrackedBytes {
  uint64_t live = 0;
  uint64_t peak = 0;
};

// Installs the tracking allocator once (idempotent, thread-safe).
void install_tracking_allocator();
TrackedBytes tracked_bytes();
// Starts a new peak measurement at the current live bytes.
void reset_tracked_peak();

}  // namespace fp8s
