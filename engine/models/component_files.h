// Finding a model's other files by role (issue 56, "one discovery routine"): a diffusers model
// folder's subfolder, a ComfyUI models/ tree around the model (its `subdirs`: text_encoders, clip, vae, ...) and then the model's own
// folder, files whose names start with one of the role's hints, in the hints' order, the first
// that the family accepts. LibTorch-free; a family's explicit flag comes before it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/types.h"
#include "io/safetensors.h"

namespace fp8s {

// One component: the file and the prefix of its names there (path empty: not found).
struct ComponentSource {
  std::string path;
  std::string prefix;
  bool found() const { return !path.empty(); }
};

// The storage a text encoder or an autoencoder is kept in: under a 16-bit storage its file's own
// type (F16, BF16 or F32 of its first 2-D tensor under `prefix`: converting between 16-bit types or
// rounding F32 saves nothing worth the change of numbers), else `storage` (FP8, FP32). A denoiser
// always takes the request's storage.
StorageSpec component_storage(const SafetensorsFile& file, const std::string& prefix, const StorageSpec& storage);
// The bytes one component's tensors under its prefix take in `storage`: FP8 one byte for each 2-D
// or 4-D weight when `quantised` (embeddings excepted), else the storage's float width (with
// `keep_file_type`, a 16-bit storage keeps the file's 16-bit type: component_storage); the
// FP8 files' scale tensors are not counted. From the header alone; 0 when the component is absent.
uint64_t component_weight_bytes(const ComponentSource& c, const StorageSpec& storage, bool quantised, bool keep_file_type);

// "" when no file is found; `searched` gets the folders looked in (for the error that follows). A
// diffusers model folder (`model` a folder) is asked first for its `folder_sub` ("text_encoder",
// "vae"), which opens as one file (its shards).
std::string find_component_file(const std::string& model, const std::vector<std::string>& hints,
                                const std::vector<std::string>& subdirs,
                                const std::function<bool(const SafetensorsFile&)>& accepts, std::vector<std::string>& searched,
                                const std::string& folder_sub = "");

}  // namespace fp8s
