#include "memory/process_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

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

uint64_t memory_size_bytes(const std::string& text, const char* variable) {
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  const double scale = unit.empty() ? 1 : unit == "K" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : unit == "T" ? 1e12 : -1;
  if (used == 0 || !(v > 0) || scale < 0 || v * scale > 1e18) {
    throw InputError(std::string(variable) + "='" + text + "' is not a memory size; use e.g. 8G, 512M or a number of bytes");
  }
  return static_cast<uint64_t>(v * scale);
}

uint64_t available_memory_bytes() {
  const uint64_t real = read_kb_field("/proc/meminfo", "MemAvailable");
  const char* cap = std::getenv("FP8S_AVAILABLE_MEMORY");
  if (!cap || !*cap) return real;
  const uint64_t limit = memory_size_bytes(cap);
  return real == 0 ? limit : std::min(real, limit);
}

}  // namespace fp8s
