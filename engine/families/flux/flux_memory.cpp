// The Flux family's memory: each component's bytes in a storage from the headers, the working
// memory, the peak of a generation and the weight budget it runs under (docs/architecture.md,
// "Weight budget and streaming").
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/strings.h"
#include "families/flux/flux_family.h"
#include "families/weight_budget.h"
#include "io/safetensors.h"

namespace fp8s {

FluxComponentBytes flux_storage_bytes(const FluxFiles& files, const StorageSpec& storage) {
  FluxComponentBytes b;
  b.transformer = component_weight_bytes(files.transformer, storage, true, false);
  b.t5 = component_weight_bytes(files.t5, storage, true, true);
  b.clip_l = component_weight_bytes(files.clip_l, storage, true, true);
  b.vae = component_weight_bytes(files.vae, storage, storage.fp8_vae, true);
  return b;
}

uint64_t flux_working_bytes(int width, int height, int batch, ComputeType compute, int hidden_size) {
  const uint64_t tokens = static_cast<uint64_t>(width / 16) * static_cast<uint64_t>(height / 16) + 512;
  // FP32 image/text streams, the modulated and MLP intermediates (about 20 hidden-wide rows a token)
  const uint64_t activations = static_cast<uint64_t>(batch) * tokens * static_cast<uint64_t>(hidden_size) * 20 * 4 + (256ull << 20);
  // the autoencoder's full-resolution levels: ~6 live 128-channel maps in the compute type
  const uint64_t element = compute == ComputeType::FP32 ? 4 : 2;
  const uint64_t decode = static_cast<uint64_t>(batch) * static_cast<uint64_t>(width) * static_cast<uint64_t>(height) * 128 * 6 * element;
  return std::max(activations, decode);
}

int flux_hidden_size(const FluxFiles& files) {
  return static_cast<int>(SafetensorsFile(files.transformer.path).at(files.transformer.prefix + "img_in.weight").shape[0]);
}

uint64_t flux_peak_bytes(const FluxComponentBytes& b, int width, int height, int batch, ComputeType compute, int hidden_size) {
  const uint64_t text_phase = b.t5 + b.clip_l;
  const uint64_t sample_phase = b.transformer + b.vae + flux_working_bytes(width, height, batch, compute, hidden_size);
  return std::max(text_phase, sample_phase) + kFluxProcessBytes;
}

uint64_t flux_largest_block_bytes(int hidden_size, const StorageSpec& storage) {
  // a double block: two streams of qkv 3h², proj h², MLP 8h² and modulation 6h²
  const uint64_t params = 36ull * static_cast<uint64_t>(hidden_size) * static_cast<uint64_t>(hidden_size);
  return static_cast<uint64_t>(static_cast<double>(params) * stored_bytes_per_weight(storage.weights));
}

std::optional<uint64_t> flux_weight_budget(const std::function<FluxComponentBytes(const StorageSpec&)>& bytes_of,
                                           int hidden_size, const StorageSpec& storage, int width, int height,
                                           int batch, ComputeType compute, uint64_t available,
                                           std::optional<uint64_t> requested) {
  const auto b = bytes_of(storage);
  PhaseBytes p;
  p.denoiser = b.transformer;
  p.text = b.t5 + b.clip_l;
  p.vae = b.vae;
  p.working = flux_working_bytes(width, height, batch, compute, hidden_size);
  p.process = kFluxProcessBytes;
  p.denoiser_staging = 2 * flux_largest_block_bytes(hidden_size, storage);
  // T5-XXL's 24 layers stream under the budget too (its embedding counted in: an upper bound);
  // CLIP-L stays whole
  p.text_staging = 2 * (b.t5 / 24) + b.clip_l;
  const std::string what = storage_label(storage) + " Flux at " + std::to_string(width) + "x" + std::to_string(height);
  return choose_weight_budget(p, available, requested, what, is_quantised(storage.weights), [&] {
    StorageSpec fp8 = storage;
    fp8.weights = WeightType::FP8_E4M3;
    return flux_peak_bytes(bytes_of(fp8), width, height, batch, compute, hidden_size);
  });
}

void check_flux_fits(const FluxFiles& files, const StorageSpec& storage, int width, int height, int batch,
                     ComputeType compute, uint64_t available) {
  flux_weight_budget([&](const StorageSpec& s) { return flux_storage_bytes(files, s); }, flux_hidden_size(files),
                     storage, width, height, batch, compute, available, std::nullopt);
}

}  // namespace fp8s
