// A device's memory: the CUDA caching allocator's figures, the card's free memory (and a simulated
// card, FP8S_AVAILABLE_VRAM), the cache emptied between compare modes, and page-locking of host
// memory for the streaming transport. Each is a no-op (or 0) on the CPU and in a build without CUDA.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

#include "backend/backend.h"
#include "core/error.h"
#include "memory/process_memory.h"

#ifdef FP8S_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace fp8s::backend {
namespace {

#ifdef FP8S_WITH_CUDA
// cudaMemGetInfo on `device`: {free, total}, or {0, 0} where it fails.
std::pair<std::size_t, std::size_t> mem_info(const at::Device& device) {
  const c10::cuda::CUDAGuard guard(device.index());
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return {0, 0};
  return {free_bytes, total_bytes};
}

// The caching allocator's current and peak bytes on `device` (DeviceMemory without `used`).
DeviceMemory allocator_memory(const at::Device& device) {
  DeviceMemory m;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto& a = stats.allocated_bytes[0];  // StatType::AGGREGATE
  const auto& r = stats.reserved_bytes[0];
  m.allocated = static_cast<uint64_t>(a.current);
  m.allocated_peak = static_cast<uint64_t>(a.peak);
  m.reserved = static_cast<uint64_t>(r.current);
  m.reserved_peak = static_cast<uint64_t>(r.peak);
  return m;
}
#endif

}  // namespace

DeviceMemory device_memory(const at::Device& device) {
  DeviceMemory m;
#ifdef FP8S_WITH_CUDA
  if (device.is_cuda()) {
    m = allocator_memory(device);
    const auto [free_bytes, total_bytes] = mem_info(device);
    m.used = total_bytes - free_bytes;
  }
#endif
  (void)device;
  return m;
}

void empty_device_cache() {
#ifdef FP8S_WITH_CUDA
  if (cuda_device_count() > 0) {
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#endif
}

std::optional<uint64_t> simulated_vram_bytes() {
  const char* e = std::getenv("FP8S_AVAILABLE_VRAM");
  if (!e || !*e) return std::nullopt;
  return memory_size_bytes(e, "FP8S_AVAILABLE_VRAM");
}

uint64_t device_available_bytes(const at::Device& device) {
  if (!device.is_cuda()) return 0;
  const auto simulated = simulated_vram_bytes();
  uint64_t available = 0;
#ifdef FP8S_WITH_CUDA
  if (cuda_device_count() > device.index()) {
    const auto free_bytes = mem_info(device).first;
    const DeviceMemory m = allocator_memory(device);
    if (free_bytes > 0) available = free_bytes + (m.reserved > m.allocated ? m.reserved - m.allocated : 0);
  }
#endif
  if (simulated) return available ? std::min(available, *simulated) : *simulated;
  return available;
}

bool register_host_memory(void* data, std::size_t bytes) {
#ifdef FP8S_WITH_CUDA
  if (cudaHostRegister(data, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
  (void)cudaGetLastError();  // a failed registration leaves no sticky error behind
  return false;
#else
  (void)data, (void)bytes;
  return false;
#endif
}

void unregister_host_memory(void* data) {
#ifdef FP8S_WITH_CUDA
  if (cudaHostUnregister(data) != cudaSuccess) (void)cudaGetLastError();
#else
  (void)data;
#endif
}

void reset_device_peak(const at::Device& device) {
#ifdef FP8S_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
  (void)device;
}

}  // namespace fp8s::backend
