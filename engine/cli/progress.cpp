#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/rate.h"

namespace fp8s {

ProgressPrinter::ProgressPrinter(std::string label, std::size_t total, std::string unit)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void ProgressPrinter::update(std::size_t done) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const Rate r = estimate_rate(done, total_, elapsed);
  const double rate = r.per_second, eta = r.eta_seconds;
  if (tty_) {
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 30;
    const int filled = total_ ? static_cast<int>(width * done / total_) : width;
    std::fprintf(stderr, "\r%s [%.*s%*s] %zu/%zu %.1f %s/s ETA %.0fs ", label_.c_str(), filled,
                 "##############################", width - filled, "", done, total_, rate,
                 unit_.c_str(), eta);
    std::fflush(stderr);
  } else {
    const int decile = total_ ? static_cast<int>(10 * done / total_) : 10;
    if (decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stderr, "%s: %zu/%zu (%.1f %s/s, ETA %.0fs)\n", label_.c_str(), done, total_,
                 rate, unit_.c_str(), eta);
  }
}

void ProgressPrinter::finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace fp8s
