#include "models/component_files.h"

#include <algorithm>

#include "core/error.h"
#include "core/files.h"
#include "core/strings.h"

namespace fp8s {

std::string find_component_file(const std::string& model, const std::vector<std::string>& hints,
                                const std::vector<std::string>& subdirs,
                                const std::function<bool(const SafetensorsFile&)>& accepts, std::vector<std::string>& searched,
                                const std::string& folder_sub) {
  if (!folder_sub.empty() && is_dir(model) && is_dir(model + "/" + folder_sub)) {  // a diffusers model folder's own
    const std::string path = model + "/" + folder_sub;
    searched.push_back(path);
    if (accepts(SafetensorsFile(path))) return path;
  }
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

StorageSpec component_storage(const SafetensorsFile& file, const std::string& prefix, const StorageSpec& storage) {
  if (storage.weights != WeightType::FP16 && storage.weights != WeightType::BF16) return storage;
  StorageSpec s = storage;
  for (const auto& t : file.tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0 || t.shape.size() < 2) continue;
    if (t.dtype == Dtype::F16) s.weights = WeightType::FP16;
    else if (t.dtype == Dtype::BF16) s.weights = WeightType::BF16;
    else if (t.dtype == Dtype::F32) s.weights = WeightType::FP32;
    break;
  }
  return s;
}

uint64_t component_weight_bytes(const ComponentSource& c, const StorageSpec& storage_in, bool quantised, bool keep_file_type) {
  if (!c.found()) return 0;
  const SafetensorsFile f(c.path);
  const StorageSpec storage = keep_file_type ? component_storage(f, c.prefix, storage_in) : storage_in;
  const uint64_t float_bytes = storage.weights == WeightType::FP32 ? 4 : 2;
  uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    if (!starts_with(t.name, c.prefix)) continue;
    const std::string name = t.name.substr(c.prefix.size());
    const bool weight = ends_with(name, ".weight") && (t.shape.size() == 2 || t.shape.size() == 4);
    const bool embedding = name.find("embed") != std::string::npos || starts_with(name, "shared.") ||
                           name.find("relative_attention_bias") != std::string::npos;
    if (name.find("scale_weight") != std::string::npos || name.find("weight_scale") != std::string::npos ||
        name.find("input_scale") != std::string::npos || name.find("scale_input") != std::string::npos) {
      continue;  // FP8 files' scales: a few bytes, read with their weights
    }
    const bool small = quantised && is_quantised(storage.weights) && weight && !embedding;
    // INT8/MXFP8/NVFP4 keep convolutions 16-bit (ComfyUI has no quantised Conv2d)
    const bool conv = t.shape.size() == 4 && is_block_storage(storage.weights);
    total += small && !conv ? static_cast<uint64_t>(static_cast<double>(t.numel()) * stored_bytes_per_weight(storage.weights))
                            : t.numel() * float_bytes;
  }
  return total;
}

}  // namespace fp8s
