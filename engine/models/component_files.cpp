#include "models/component_files.h"

#include <algorithm>

#include "core/error.h"
#include "core/files.h"
#include "core/strings.h"

namespace fp8s {

std::string find_component_file(const std::string& model, const std::vector<std::string>& hints,
                                const std::vector<std::string>& subdirs,
                                const std::function<bool(const SafetensorsFile&)>& accepts, std::vector<std::string>& searched) {
  // ComfyUI's layout: models/{diffusion_models,unet,checkpoints}/MODEL beside models/<subdir>/
  const std::string here = dirname_of(model), root = dirname_of(here);
  std::vector<std::string> folders;
  for (const auto& s : subdirs) folders.push_back(root + "/" + s);
  folders.push_back(here);
  for (const auto& f : folders) {
    if (std::find(searched.begin(), searched.end(), f) == searched.end()) searched.push_back(f);
  }
  for (const auto& hint : hints) {
    for (const auto& folder : folders) {
      for (const auto& name : safetensors_in(folder)) {
        const std::string path = folder + "/" + name;
        if (!starts_with(name, hint) || path == model) continue;
        try {
          if (accepts(SafetensorsFile(path))) return path;
        } catch (const InputError&) {
          // an unreadable neighbour is not this model's problem
        }
      }
    }
  }
  return {};
}

}  // namespace fp8s
