// The formats reference roles of `fp8studio-cli probe` (../shared/reference/formats/README.md):
// one Linear layer of a file loaded as the engine loads it and dequantised or run, and a weight
// quantised by the engine's quantisers into the tensors a comfy_quant file stores.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

#include "io/safetensors.h"

namespace fp8s {

// Layer `layer` ([n, k], bias when the file has one) of `file` loaded into a Linear layer (FP32
// storage; comfy_quant layers as stored): its weight decoded to FP32 ("weight"), and with `x`
// defined the layer's output x·Wᵀ + b in FP32 ("y").
std::map<std::string, at::Tensor> probe_quant_layer(const SafetensorsFile& file, const std::string& layer, int64_t n, int64_t k,
                                                    const at::Tensor& x);
// `weight` [N, K] quantised to `format` (a comfy_quant name: float8_e4m3fn, float8_e5m2,
// int8_tensorwise, mxfp8, nvfp4), per row or per tensor, int8 rotated by ConvRot of order `convrot`
// (0: none): the stored tensors as F32 values ("qdata": byte codes 0..255 or int8 values; "scale";
// nvfp4's "scale_2"), in their stored shapes.
std::map<std::string, at::Tensor> probe_quantize(const at::Tensor& weight, const std::string& format, bool per_row, int convrot);

// What a storage type does to a file's weights: every Linear weight (2-D `.weight`, float, not an
// embedding table nor the autoencoder's: what convert --to quantises) read one at a time, quantised
// to `type` (FP8 with `scale`) and decoded again; ‖W − Ŵ‖ / ‖W‖ over all of them together.
struct WeightError {
  double rel_rms = 0;
  uint64_t layers = 0, weights = 0;
};
WeightError measure_weight_error(const SafetensorsFile& file, WeightType type, Fp8Scale scale);

}  // namespace fp8s
