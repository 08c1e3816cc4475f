#include "memory/process_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdio>
#include <cstring>

namespace fp8s {
namespace {

uint64_t read_kb_field(const char* file, const char* field) {
  FILE* f = std::fopen(file, "r");
  if (!f) return 0;
  char line[256];
  uint64_t value = 0;
  const std::size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') {
      unsigned long long kb = 0;
      if (std::sscanf(line + len + 1, "%llu", &kb) == 1) value = kb * 1024ull;
      break;
    }
  }
  std::fclose(f);
  return value;
}

}  // namespace

ProcessMemory read_process_memory() {
  return {read_kb_field("/proc/self/status", "VmRSS"), read_kb_field("/proc/self/status", "VmHWM")};
}

bool reset_rss_peak() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

void trim_heap() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

uint64_t available_memory_bytes() { return read_kb_field("/proc/meminfo", "MemAvailable"); }

}  // namespace fp8s
