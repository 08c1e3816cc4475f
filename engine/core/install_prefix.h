// Where the running program is installed: <prefix> of <prefix>/bin/program, for data files shipped
// in <prefix>/share/fp8studio (CLIP vocabulary, demo model).
#pragma once

#include <string>

namespace fp8s {

// Empty when /proc/self/exe cannot be read.
std::string install_prefix();

}  // namespace fp8s
