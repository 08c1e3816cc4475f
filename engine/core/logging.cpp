#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace fp8s {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("fp8s");
    l->set_pattern("[%l] %v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *logger;
}

void set_log_level(const std::string& level) {
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    throw InputError("unknown log level '" + level +
                     "': use trace, debug, info, warn, error or off");
  }
  log().set_level(parsed);
}

}  // namespace fp8s
