// Throughput and time left from the work done so far: the CLI's progress bar and the GUI's ETA.
#pragma once

#include <cstddef>

namespace fp8s {

struct Rate {
  double per_second = 0;   // units done per second
  double eta_seconds = 0;  // at that rate, for what is left
};

inline Rate estimate_rate(std::size_t done, std::size_t total, double elapsed_seconds) {
  Rate r;
  if (elapsed_seconds > 0) r.per_second = static_cast<double>(done) / elapsed_seconds;
  if (r.per_second > 0 && total > done) r.eta_seconds = static_cast<double>(total - done) / r.per_second;
  return r;
}

}  // namespace fp8s
