// The shipped demo model: where it is found, and its integrity check (sha256 compiled into the
// program from resources/demo/demo-sd1.safetensors.sha256). No LibTorch types here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/request.h"

namespace fp8s::demo {

constexpr const char* kDemoFile = "demo-sd1.safetensors";
// Where no demo model is installed, front ends write the demo's architecture with random weights
// under this name (a working pipeline, a meaningless picture).
constexpr const char* kRandomDemoFile = "demo-tiny-sd1-random-weights.safetensors";

// The folders searched, in order: $FP8S_DEMO_DIR, <prefix>/share/fp8studio/demo (installed), the
// source tree's resources/demo (build tree).
std::vector<std::string> demo_search_paths();
// The demo checkpoint's path, verified against its sha256. Throws InputError naming the places
// looked at when it is absent, or the file when its hash differs (corrupt or replaced).
std::string find_demo_model();
// The expected sha256 (hex), empty when the build has no demo model.
std::string expected_demo_sha256();
// The first run's settings: a prompt the demo model knows, and the sampler, steps and size it was
// trained for (what the GUI shows before the user has typed anything).
GenerationRequest first_run_request();
// Writes the demo's architecture (tiny SD1) with random weights from `seed` to `out` (replaced).
void make_random_demo_model(const std::string& out, uint64_t seed);

}  // namespace fp8s::demo
