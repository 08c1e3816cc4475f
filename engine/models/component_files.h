// Finding a model's other files by role (issue 56, "one discovery routine"): a ComfyUI models/
// tree around the model (its `subdirs`: text_encoders, clip, vae, ...) and then the model's own
// folder, files whose names start with one of the role's hints, in the hints' order, the first
// that the family accepts. LibTorch-free; a family's explicit flag comes before it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace fp8s {

// "" when no file is found; `searched` gets the folders looked in (for the error that follows).
std::string find_component_file(const std::string& model, const std::vector<std::string>& hints,
                                const std::vector<std::string>& subdirs,
                                const std::function<bool(const SafetensorsFile&)>& accepts, std::vector<std::string>& searched);

}  // namespace fp8s
