// Architecture detection from a checkpoint's keys, and the configuration of an opened checkpoint.
// (Configurations: config.h; the key layout: checkpoint_layout.h; tensor roles: tensor_roles.h.)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/checkpoint_layout.h"
#include "models/config.h"
#include "models/tensor_roles.h"

namespace fp8s {

// Architecture detection from the keys (the decision order of reference/keys/README.md).
struct Detection {
  Arch arch = Arch::UNKNOWN;
  std::string variant;  // "", "inpainting", "instruct-pix2pix", "SSD-1B", ...
  std::string description() const;
};
using ShapeMap = std::map<std::string, std::vector<int64_t>>;
Detection detect_architecture(const ShapeMap& shapes);
Detection detect_architecture(const SafetensorsFile& file);

// The configuration of an opened checkpoint: `ldm.config` metadata if present, else the preset
// for the detected architecture. Throws InputError for architectures without one.
ModelConfig config_for(const SafetensorsFile& file);

// What the registered families load ("SD 1.x, SDXL; Flux.1 dev and schnell; ..."), for the error
// about a file none of them takes; the family registry sets the source before main().
void set_supported_families_source(std::string (*source)());

}  // namespace fp8s
