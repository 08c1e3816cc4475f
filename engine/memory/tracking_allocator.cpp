#include "memory/tracking_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <mutex>

namespace fp8s {
namespace {

// Every block carries its size in a header in front of the data, so the deleter needs no context
// object: oneDNN allocates through raw_allocate(), which requires context == data and a
// raw_deleter(). The header keeps the data 64-byte aligned.
constexpr std::size_t kHeader = 64;

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
c10::Allocator* g_base = nullptr;  // the allocator we wrap (LibTorch's default CPU allocator)

void note_alloc(int64_t n) {
  const int64_t live = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void tracked_delete(void* data) {
  if (!data) return;
  auto* base = static_cast<uint8_t*>(data) - kHeader;
  const auto n = *reinterpret_cast<std::size_t*>(base);
  g_live.fetch_sub(static_cast<int64_t>(n), std::memory_order_relaxed);
  g_base->raw_deleter()(base);
}

// c10::Allocator's interface changed in LibTorch 2.x: allocate() is no longer const, and
// copy_data() must be defined.
#if TORCH_VERSION_MAJOR >= 2
#define FP8S_ALLOCATE_CONST
#else
#define FP8S_ALLOCATE_CONST const
#endif

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) FP8S_ALLOCATE_CONST override {
    auto* base = static_cast<uint8_t*>(g_base->raw_allocate(n + kHeader));
    *reinterpret_cast<std::size_t*>(base) = n;
    note_alloc(static_cast<int64_t>(n));
    void* data = base + kHeader;
    return {data, data, &tracked_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_delete; }
#if TORCH_VERSION_MAJOR >= 2
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif
};

TrackingAllocator g_allocator;

}  // namespace

void install_tracking_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_base = c10::GetCPUAllocator();
    c10::SetCPUAllocator(&g_allocator, /*priority=*/100);
  });
}


TrackedBytes tracked_bytes() {
  return {static_cast<uint64_t>(std::max<int64_t>(0, g_live.load())),
          static_cast<uint64_t>(std::max<int64_t>(0, g_peak.load()))};
}

void reset_tracked_peak() { g_peak.store(g_live.load()); }

}  // namespace fp8s
