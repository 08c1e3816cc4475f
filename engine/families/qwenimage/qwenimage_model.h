// Qwen-Image generation (families/qwenimage/qwenimage_family.h): the prompt through Qwen-Image's
// template and Qwen2.5-VL's last hidden state (34 rows dropped, at most --qwen-max-length kept), the
// transformer sampled with the dynamic-shift schedule and true CFG (with a negative prompt), and
// the Wan 2.1 autoencoder on one frame. The three parts are a component set
// (families/component_set.h): each loaded when first used in the request's storage, the phases
// taking turns where they do not fit together, the transformer's 60 blocks and the text encoder's
// layers streamed under a weight budget.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/engine.h"
#include "pipeline/family.h"

namespace fp8s {

// Qwen-Image's settings (the prompt embeddings' row limit) and its component roles.
std::vector<FamilyOption> qwenimage_options();
std::vector<ComponentRole> qwenimage_roles();
// The traits of a Qwen-Image transformer `dim` wide (the tiny reference files: 32).
FamilyTraits qwenimage_traits(int dim);
// What `--weights auto` is for a Qwen-Image file: its transformer's FP8 format, else BF16.
StorageSpec qwenimage_auto_storage(const SafetensorsFile& file);
// The weight bytes a load of `options` would hold in `storage`, from the headers (its components
// found as a load finds them).
WeightBytes qwenimage_estimate(const LoadOptions& options, const StorageSpec& storage);
// inspect --weight-budget: the transformer's residency plan as a load under `budget` makes it.
ResidencyPlan qwenimage_plan(const LoadOptions& options, const StorageSpec& storage, uint64_t budget);
// The component files a load of `options` uses (inspect and the Model panel list them).
std::vector<ComponentInfo> qwenimage_components(const LoadOptions& options);
std::unique_ptr<FamilyModel> open_qwenimage(const LoadOptions& options, const at::Device& device);

}  // namespace fp8s
