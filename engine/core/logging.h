// The engine's one logger (spdlog), writing to stderr; front ends set its level.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace fp8s {

// Returns the shared logger, created on first use (stderr, "[level] message").
spdlog::logger& log();

// Sets the level from a name: trace, debug, info, warn, error, off. Throws InputError otherwise.
void set_log_level(const std::string& level);

}  // namespace fp8s
