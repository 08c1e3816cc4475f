// The weight budget a request runs under (docs/architecture.md, "Weight budget and streaming"),
// for any family whose phases take turns: a text phase (the text encoders) and a sampling phase
// (the denoiser, the autoencoder and the working memory), each beside what the process holds.
// LibTorch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/types.h"

namespace fp8s {

struct PhaseBytes {
  uint64_t denoiser = 0, text = 0, vae = 0;  // the weights in the request's storage
  uint64_t working = 0;                      // the sampling phase's working memory
  uint64_t process = 0;                      // what the process holds besides
  // two staged blocks of the denoiser and of the text encoder (when its layers stream too; 0: they do not)
  uint64_t denoiser_staging = 0, text_staging = 0;
  // the larger phase with the resident weights capped at `budget` (plus the staged blocks)
  uint64_t peak(std::optional<uint64_t> budget) const;
};

// The budget for a request: `requested` when it fits (DoesNotFit with both figures when not), or
// auto: unset when everything fits resident, else the most the resident blocks may take beside
// the rest (binary search). DoesNotFit when even every block streamed does not fit, naming
// `what` ("FP16 Flux at 512x512") and, for a 16-bit storage, the FP8 peak `fp8_peak` gives.
// `available` 0: unknown (as asked).
std::optional<uint64_t> choose_weight_budget(const PhaseBytes& bytes, uint64_t available, std::optional<uint64_t> requested,
                                             const std::string& what, bool fp8_storage,
                                             const std::function<uint64_t()>& fp8_peak);

// "12.3 GB"
std::string gb_text(uint64_t bytes);
// "FP16", "BF16", "FP32" or "FP8": a storage as a refusal names it
std::string storage_label(const StorageSpec& storage);

}  // namespace fp8s
