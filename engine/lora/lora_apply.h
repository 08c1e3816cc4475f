// LoRA applied to a layer (models/nn.h QuantisedLayer), in either mode: merged into its stored
// weight (decoded, summed in FP32, stored again the way the layer stores it), or online, as an
// output term y += scale · up(down(x)) beside an untouched base weight.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"

namespace fp8s {

class QuantisedLayer;
struct LoraModule;

// One LoRA module's factors for a layer: down [r, in] or [r, in, kh, kw], up [out, r] or
// [out, r, 1, 1] (FP32), and multiplier · alpha / rank.
struct LoraFactor {
  at::Tensor down, up;
  double scale = 1;
};

// The mode a request's LoRA set runs in: Auto is online under FP8 storage (a merge would round the
// sum to FP8), merge otherwise.
LoraMode effective_lora_mode(LoraMode mode, const StorageSpec& storage);
// A module's factors for its target (lora/lora_keys.h lora_target_rows): up placed at the target's
// rows of a zero [weight_rows, r] (its halves swapped for "#swap"), scale = multiplier · alpha / rank.
LoraFactor lora_factor_for(const LoraModule& module, const std::string& target, int64_t weight_rows, double multiplier);

// Adds the factors as an output term on the layer's device (a convolution's down keeps its
// kernel, LoCon, or is 1x1).
void add_online_lora(QuantisedLayer& layer, const LoraFactor& factor);
// Drops the layer's online LoRA terms; false when it had none.
bool clear_online_loras(QuantisedLayer& layer);
// W + Σ scale · up @ down, one layer's worth of FP32 at a time, stored again like the layer
// stores W now (FP8: quantised again with a fresh scale; stochastic rounding from `seed` if set).
void merge_loras(QuantisedLayer& layer, const std::vector<LoraFactor>& factors, const StorageSpec& storage,
                 std::optional<uint64_t> stochastic_seed = std::nullopt);
// Merges each layer's gathered factors (key -> factors; `layers`: key -> layer), one layer's FP32
// delta at a time, stochastically rounded from a seed fixed per key under MergeStochastic, and
// appends the keys to `touched`.
void merge_lora_sets(const std::map<std::string, std::vector<LoraFactor>>& merged,
                     const std::map<std::string, QuantisedLayer*>& layers, const StorageSpec& storage, LoraMode mode,
                     std::vector<std::string>& touched);

}  // namespace fp8s
