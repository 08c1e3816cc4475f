// Process memory as the kernel sees it: resident set and its peak (/proc/self/status).
#pragma once

#include <cstdint>
#include <string>

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
// MemAvailable from /proc/meminfo (0 when unknown), capped by $FP8S_AVAILABLE_MEMORY when set (a
// size such as 8G or 512M: run as if the machine had that much, to see what the memory estimate
// refuses on a smaller machine; InputError for a value that is not a size).
uint64_t available_memory_bytes();
// "8G", "512M", "1.5g", "123456" (bytes; K/M/G/T decimal, an optional B) -> bytes; otherwise an
// InputError naming `variable`, the environment variable the text came from.
uint64_t memory_size_bytes(const std::string& text, const char* variable = "FP8S_AVAILABLE_MEMORY");

}  // namespace fp8s
