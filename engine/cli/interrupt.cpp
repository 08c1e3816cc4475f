#include "cli/interrupt.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "io/png.h"

namespace fp8s::cli {
namespace {

std::atomic<bool> g_cancel{false};

void on_interrupt(int sig) {
  g_cancel.store(true);
  std::signal(sig, SIG_DFL);  // a second Ctrl+C: the default action, at once
}

void start_watchdog() {
  std::thread([] {
    using namespace std::chrono_literals;
    while (!g_cancel.load()) std::this_thread::sleep_for(20ms);
    const auto deadline = std::chrono::steady_clock::now() + 1500ms;
    while (std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
    while (png_writes_in_flight() > 0) std::this_thread::sleep_for(5ms);
    std::fputs("error: cancelled\n", stderr);
    std::_Exit(130);
  }).detach();
}

}  // namespace

const std::atomic<bool>& install_interrupt() {
  static const bool installed = [] {
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    start_watchdog();
    return true;
  }();
  (void)installed;
  return g_cancel;
}

}  // namespace fp8s::cli
