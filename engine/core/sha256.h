// SHA-256 (FIPS 180-4), for A1111-compatible model hashes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fp8s {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  std::string hex();  // finishes and returns 64 lower-case hex digits

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// The sha256 (hex) of a whole file, read in 1 MiB chunks; "" when it cannot be opened.
std::string sha256_file(const std::string& path);
// A warning (the file is still used) when `path` is not the file this version was checked against:
// "<path>: not the <what> this version was checked against (sha256 differs); using it".
void warn_unless_sha256(const std::string& path, const char* expected, const std::string& what);

}  // namespace fp8s
