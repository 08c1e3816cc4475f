#include "demo/demo_model.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/install_prefix.h"
#include "core/sha256.h"
#include "core/version.h"
#include "demo/scenes.h"
#include "io/safetensors.h"
#include "models/config.h"
#include "models/synthetic.h"

namespace fp8s::demo {
namespace fs = std::filesystem;

std::vector<std::string> demo_search_paths() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("FP8S_DEMO_DIR"); env && *env) paths.emplace_back(env);
  if (const auto prefix = install_prefix(); !prefix.empty()) paths.push_back(prefix + "/share/fp8studio/demo");
  paths.emplace_back(kSourceDemoDir);
  return paths;
}

std::string expected_demo_sha256() { return kDemoSha256; }

std::string find_demo_model() {
  std::string looked;
  for (const auto& dir : demo_search_paths()) {
    const std::string path = dir + "/" + kDemoFile;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      looked += (looked.empty() ? "" : ", ") + dir;
      continue;
    }
    const std::string want = expected_demo_sha256();
    if (!want.empty()) {
      const std::string got = sha256_file(path);
      if (got != want) {
        throw InputError(path + ": the demo model's sha256 is " + got + ", expected " + want +
                         " (the file is corrupt or was replaced: reinstall FP8 Studio)");
      }
    }
    return path;
  }
  throw InputError("the built-in demo model was not found (looked in " + looked +
                   "); give a checkpoint with --model, or set FP8S_DEMO_DIR");
}

GenerationRequest first_run_request() {
  GenerationRequest r;
  r.prompt = "a small yellow star in the top left corner on a blue background";
  r.steps = 20;
  r.cfg = 5.0f;
  r.sampler = Sampler::Euler;
  r.schedule = Schedule::Normal;
  r.width = r.height = kImageSize;
  return r;
}

void make_random_demo_model(const std::string& out, uint64_t seed) {
  make_synthetic({preset_tiny_sd1(), Dtype::F16, seed, out, true});
}

}  // namespace fp8s::demo
