// The Z-Image family's model (pipeline/family.h): the transformer, the Qwen3 text encoder and the
// Flux.1 autoencoder as a component set (families/component_set.h): each loaded from its file in
// the request's storage when first used, the phases taking turns where they do not fit together,
// and the transformer's and the text encoder's layers streamed under a weight budget.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "pipeline/family.h"
#include "families/zimage/zimage_files.h"

namespace fp8s {

struct LoadOptions;
class SafetensorsFile;

// The traits of a Z-Image transformer of width `dim` with an autoencoder downsampling `vae_factor`
// times (the tiny reference files: 64 wide, 2x).
FamilyTraits zimage_traits(int dim, int vae_factor);
// Z-Image's settings (the schedule's shift, CFG normalisation and truncation, the text encoder's
// token limit) and its component roles (zimage_family.cpp).
std::vector<FamilyOption> zimage_options();
std::vector<ComponentRole> zimage_roles();
// What `--weights auto` is for a Z-Image file: its transformer's FP8 format, else BF16.
StorageSpec zimage_auto_storage(const SafetensorsFile& file);
std::unique_ptr<FamilyModel> open_zimage(const LoadOptions& options, const at::Device& device);
// The components a load of `options` uses (resolve_zimage_files with its --text-encoder and --vae).
ZImageFiles zimage_files(const LoadOptions& options);
// The weight bytes a load of `options` holds in `storage`, from the headers.
WeightBytes zimage_estimate(const LoadOptions& options, const StorageSpec& storage);
// inspect --weight-budget: the transformer's residency plan as a load under `budget` makes it.
ResidencyPlan zimage_plan(const LoadOptions& options, const StorageSpec& storage, uint64_t budget);

}  // namespace fp8s
