#include "core/install_prefix.h"

#include <unistd.h>

#include <filesystem>

namespace fp8s {

std::string install_prefix() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return std::filesystem::path(buf).parent_path().parent_path().string();  // <prefix>/bin/program
}

}  // namespace fp8s
