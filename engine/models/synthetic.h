// `make-synthetic`: checkpoints with random weights in exactly a real model's key layout.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "models/architecture.h"

namespace fp8s {

// Called after each tensor with (tensors done, tensors in all, bytes written).
using ProgressFn = std::function<void(std::size_t, std::size_t, uint64_t)>;

struct SyntheticOptions {
  ModelConfig config;
  Dtype float_dtype = Dtype::F16;  // F16 or F32
  uint64_t seed = 0;
  std::string out;
  bool overwrite = false;
};

// Writes the checkpoint tensor by tensor (never more than one tensor's chunk in memory).
// Weights are uniform in +-sqrt(3 / fan_in), biases small, norms 1/0, buffers by their formulas;
// the same seed gives the same file. Tiny configurations carry their `ldm.config` metadata.
void make_synthetic(const SyntheticOptions& options, const ProgressFn& progress = {});
// The same for any layout (the Flux family's, families/flux/flux_model.h): entries of dtype F8_E4M3 or
// F8_E5M2 hold the codes of the random values (no scale, as the plain FP8 files).
void make_synthetic_layout(const std::vector<LayoutEntry>& layout, const std::map<std::string, std::string>& metadata,
                           uint64_t seed, const std::string& out, bool overwrite, const ProgressFn& progress = {});

// The ldm DDPM schedule buffers (scaled-linear betas 0.00085..0.012, 1000 steps), by name.
std::vector<float> ddpm_buffer(const std::string& name);

}  // namespace fp8s
