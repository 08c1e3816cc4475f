// Progress on stderr for long CLI work: a redrawn bar on a terminal, plain lines otherwise.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace fp8s {

class ProgressPrinter {
 public:
  ProgressPrinter(std::string label, std::size_t total, std::string unit = "it");
  void update(std::size_t done);
  void finish();

 private:
  std::string label_;
  std::size_t total_;
  std::string unit_;
  bool tty_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool finished_ = false;
};

}  // namespace fp8s
