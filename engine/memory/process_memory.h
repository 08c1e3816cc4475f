// Process memory as the kernel sees it: resident set and its peak (/proc/self/status).
#pragma once

#include <cstdint>

namespace fp8s {

struct ProcessMemory {
  uint64_t rss_bytes = 0;       // VmRSS
  uint64_t rss_peak_bytes = 0;  // VmHWM
};

ProcessMemory read_process_memory();
// Resets VmHWM through /proc/self/clear_refs where permitted; returns false otherwise.
bool reset_rss_peak();
// Returns the allocator's free pages to the kernel (glibc malloc_trim), so that RSS shows what is
// live: after a storage switch the old weights' heap pages would otherwise stay resident.
void trim_heap();
// MemAvailable from /proc/meminfo (0 when unknown).
uint64_t available_memory_bytes();

}  // namespace fp8s
