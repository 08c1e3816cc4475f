// Included once by each executable's main file (the CLI, the app, the tests that measure the app):
// registers fp8s_preinit_waits() in .preinit_array, which the dynamic loader runs before any shared
// library's initialiser, so that libgomp and OpenBLAS read bounded waits when they start
// (core/threads.h). Only an executable may carry .preinit_array.
#pragma once

#include "core/threads.h"

namespace {
__attribute__((section(".preinit_array"), used)) void (*const fp8s_preinit_entry)(int, char**, char**) =
    &fp8s_preinit_waits;
}  // namespace
