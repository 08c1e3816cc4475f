// Ctrl+C and SIGTERM for the long commands (generate, compare, bench): the first asks the engine to
// stop at its next cancel point; a second ends the program at once; and 1.5 s after the first, work
// without a cancel point for a while (a block at a huge size) is ended by a watchdog once no PNG is
// being written, so every file is whole or absent. The process exits with 130 and "error: cancelled".
#pragma once

#include <atomic>

namespace fp8s::cli {

// Installs the handlers and the watchdog (once) and returns the flag the engine is given.
const std::atomic<bool>& install_interrupt();

}  // namespace fp8s::cli
