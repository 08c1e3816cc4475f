// `convert`: rewrites a checkpoint with its Linear/Conv2d weights stored in FP8 (streaming).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fp8/codec.h"
#include "fp8/quantize.h"
#include "io/safetensors.h"

namespace fp8s {

struct ConvertOptions {
  std::string in;
  std::string out;
  Fp8Format format = Fp8Format::E4M3FN;
  Fp8Scale scale = Fp8Scale::None;
  bool fp8_vae = false;
  bool overwrite = false;
  // F16 or BF16: every float tensor cast to it instead (an FP32 checkpoint halved, as the FP16
  // files users download are); format, scale and fp8_vae are then unused.
  std::optional<Dtype> float16;
  // INT8 (per-row scales), MXFP8 or NVFP4: every Linear weight outside the autoencoder (2-D, not
  // an embedding table) written as a ComfyUI comfy_quant layer (`.weight`, `.weight_scale`, nvfp4's
  // `.weight_scale_2`, `.comfy_quant`), everything else copied; format, scale and fp8_vae unused.
  std::optional<WeightType> blocks;
};

struct ConvertSummary {
  uint64_t quantised_tensors = 0;
  uint64_t quantised_params = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

// Reads one tensor at a time, quantises the UNet/text-encoder Linear and Conv2d weights (and the
// VAE's with fp8_vae), copies everything else unchanged. The scaled modes write ComfyUI's
// comfy_quant layout where its rules scale a layer (the UNet's Linear weights: `.weight_scale` F32,
// 0-d per tensor or [out,1] per channel, and `.comfy_quant` {"format": "float8_e4m3fn"}) and
// unscaled FP8 elsewhere; the `fp8s.quantization` metadata entry says which (with `float16`: casts every float
// tensor instead, rounding to nearest even). Atomic: a failure leaves no file.
ConvertSummary convert_checkpoint(const ConvertOptions& options,
                                  const std::function<void(std::size_t, std::size_t)>& progress = {});

// A Linear weight ComfyUI's mixed_precision_ops would load quantised (what convert --to
// int8|mxfp8|nvfp4 quantises): 2-D, `.weight`, float, outside the autoencoder, not an embedding
// table (its Embedding takes float8 and int8 only).
bool is_linear_weight(const TensorRecord& t);

// The `.comfy_quant` bytes of an FP8 layer: {"format":"float8_e4m3fn"} or float8_e5m2.
std::string comfy_quant_json(Fp8Format format);

// Widens a float tensor's raw bytes (F32, F16, BF16) to FP32. Throws for other dtypes.
void widen_to_f32(const void* raw, Dtype dtype, std::size_t n, float* out, const std::string& what);

}  // namespace fp8s
