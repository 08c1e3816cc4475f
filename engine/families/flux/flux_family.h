// The Flux.1 family: its registration and the memory figures of its components (the estimate
// that refuses what cannot fit, and T5's placement on a GPU).
#pragma once

#include <functional>
#include <string>

#include "families/flux/flux_model.h"
#include "pipeline/family.h"
#include "pipeline/request.h"

namespace fp8s {

// What a process holds besides the weights and the working memory (LibTorch, Qt, the rest).
constexpr uint64_t kFluxProcessBytes = 600ull << 20;
// The Flux.1 autoencoder's latent format (16 channels, scale 0.3611, shift 0.1159, ComfyUI's
// preview factors) for an autoencoder downsampling `vae_factor` times; Z-Image uses it too.
LatentFormat flux_latent_format(int vae_factor);
// What `--weights auto` means for a file whose released weight `key` decides it: its FP8 format
// when that weight is FP8, else BF16.
StorageSpec released_storage(const SafetensorsFile& file, const std::string& key);
// flux_memory.cpp:
// Bytes a component set takes in a storage (FP8: one byte per transformer/T5/CLIP Linear weight,
// 16 bits for the rest), from the file headers alone.
FluxComponentBytes flux_storage_bytes(const FluxFiles& files, const StorageSpec& storage);
// The sampling phase's working memory beyond the weights at width x height: the transformer's
// activations (FP32 streams, and intermediates counted at FP32) or the autoencoder's full-resolution
// levels in the compute type (FP32 twice BF16's), whichever is larger.
uint64_t flux_working_bytes(int width, int height, int batch, ComputeType compute, int hidden_size);
// The transformer's width (img_in's rows), off the file's header.
int flux_hidden_size(const FluxFiles& files);
// The peak of a generation at width x height: the larger of the text phase (T5 + CLIP-L) and the
// transformer phase (transformer + autoencoder + activations), plus what both need.
uint64_t flux_peak_bytes(const FluxComponentBytes& b, int width, int height, int batch, ComputeType compute, int hidden_size);
// The largest streamed block (a double block) in a storage: a staging slot's size.
uint64_t flux_largest_block_bytes(int hidden_size, const StorageSpec& storage);
// The weight budget the transformer runs under (docs/architecture.md, "Weight budget and
// streaming"): `requested` (--weight-budget) when the run fits with it; auto (unset): none (all
// resident) when the whole peak fits in `available`, else the most the resident blocks may take
// beside the text phase, the autoencoder, the working memory and two staged blocks. DoesNotFit
// with both numbers when it cannot fit even with every block streamed. `available` 0: unknown.
std::optional<uint64_t> flux_weight_budget(const std::function<FluxComponentBytes(const StorageSpec&)>& bytes_of,
                                           int hidden_size, const StorageSpec& storage, int width, int height,
                                           int batch, ComputeType compute, uint64_t available,
                                           std::optional<uint64_t> requested);
// The auto budget's check alone (refuses what cannot fit even streamed), from the headers.
void check_flux_fits(const FluxFiles& files, const StorageSpec& storage, int width, int height, int batch,
                     ComputeType compute, uint64_t available);
// Flux's settings (FamilyOption): a request's for a dev or schnell model (dev's distilled guidance
// and unshifted schedule, T5's length), a load's (T5 on the CPU), and its component roles.
std::vector<FamilyOption> flux_options(bool dev);
std::vector<FamilyOption> flux_load_options();
std::vector<ComponentRole> flux_roles();
// The T5 length a request uses (--t5-max-length, else 512 dev / 256 schnell).
int flux_t5_length(const GenerationRequest& r, bool dev);
// Forge's infotext for a Flux image.
std::string format_flux_infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                                 const std::string& model_hash, bool dev);
// The Flux family's registration (pipeline/family_registry.cpp).
FamilyEntry flux_family_entry();
// The hooks of the CLI's tools (flux_tools.cpp): probe roles, synthetic writers, `--weights auto`
// and the estimate before load.
FamilyTools flux_tools();

}  // namespace fp8s
