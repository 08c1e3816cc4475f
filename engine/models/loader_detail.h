// The loader's helpers that the block streaming (models/stream_transport.cpp) shares with it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "models/nn.h"

namespace fp8s::detail {

// Every QuantisedLayer under `module`, by its weight's key relative to the module (`<path>.weight`).
std::vector<std::pair<std::string, QuantisedLayer*>> quantised_layers(torch::nn::Module& module);
// Whether the layer at `key` is stored quantised (FP8) under these settings.
bool quantises(const std::string& key, const TensorRecord& rec, bool quantise_component, bool every_layer);

}  // namespace fp8s::detail
