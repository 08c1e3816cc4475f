// The Flux.1 family: its registration and the memory figures of its components (the estimate
// that refuses what cannot fit, and T5's placement on a GPU).
#pragma once

#include <functional>
#include <string>

#include "pipeline/flux_model.h"
#include "families/family.h"
#include "pipeline/request.h"

namespace fp8s {

// Bytes a component set takes in a storage (FP8: one byte per transformer/T5/CLIP Linear weight,
// 16 bits for the rest), from the file headers alone.
FluxComponentBytes flux_storage_bytes(const FluxFiles& files, const StorageSpec& storage);
// The sampling phase's working memory beyond the weights at width x height: the transformer's
// activations or the autoencoder's full-resolution levels, whichever is larger.
uint64_t flux_working_bytes(int width, int height, int batch, int hidden_size);
// The transformer's width (img_in's rows), off the file's header.
int flux_hidden_size(const FluxFiles& files);
// The peak of a generation at width x height: the larger of the text phase (T5 + CLIP-L) and the
// transformer phase (transformer + autoencoder + activations), plus what both need.
uint64_t flux_peak_bytes(const FluxComponentBytes& b, int width, int height, int batch, int hidden_size);
// Refuses (InputError) a storage whose peak exceeds `available`, with the numbers: "FP16 Flux needs
// 33.4 GB, this machine has 23.4 GB; FP8 needs 17.9 GB".
void check_flux_fits(const FluxFiles& files, const StorageSpec& storage, int width, int height, int batch,
                     uint64_t available);

// The same over any byte estimate (the family's, read from the headers once per storage).
void check_flux_fits(const std::function<FluxComponentBytes(const StorageSpec&)>& bytes_of, int hidden_size,
                     const StorageSpec& storage, int width, int height, int batch, uint64_t available);
// The T5 length a request uses (t5_max_length, else 512 dev / 256 schnell).
int flux_t5_length(const GenerationRequest& r, bool dev);
// Forge's infotext for a Flux image.
std::string format_flux_infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                                 const std::string& model_hash, bool dev);
// The Flux family's registration (families/registry.cpp).
FamilyEntry flux_family_entry();

}  // namespace fp8s
