// Quantising a weight matrix to FP8 with the scaling modes of docs/architecture.md, "Number formats".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8/codec.h"

namespace fp8s {

// Quantises `w` viewed as [rows, numel / rows] (rows = output channels) into `codes`.
// Returns the scales: none -> empty, tensor -> {amax / max_finite}, channel -> one per row; an
// all-zero tensor or row gets scale 1. Codes satisfy decode(codes[i]) * s ~= w[i].
std::vector<float> quantize_weight(const float* w, int64_t rows, int64_t numel, Fp8Format format,
                                   Fp8Scale scale, uint8_t* codes);

// Like quantize_weight, but rounds stochastically (ComfyUI's merge): each value goes to one of its
// two neighbouring FP8 values with probability proportional to closeness, from a counter-based
// generator seeded with `seed`, so the result is reproducible.
std::vector<float> quantize_weight_stochastic(const float* w, int64_t rows, int64_t numel,
                                              Fp8Format format, Fp8Scale scale, uint8_t* codes,
                                              uint64_t seed);

}  // namespace fp8s
