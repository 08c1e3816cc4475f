// FP8 checkpoints written by other tools: how a file says which layers are FP8 and where their
// scales lie, read from the header (and the few-byte `.comfy_quant` tensors) before any weight is,
// and what cannot run here, refused by name. The rules, from each reader's code (listed here;
// docs/architecture.md, "Number formats", says what FP8 storage is):
//  - plain FP8 (A1111/Forge `backend/operations.py`, stable-diffusion.cpp): an F8_E4M3/F8_E5M2
//    tensor is cast to the compute type as it is; a checkpoint saved from an FP8-typed model has
//    F8 biases, norms and embeddings too.
//  - ComfyUI legacy scaled (`comfy/utils.py` convert_old_quants): a `scaled_fp8` marker tensor at
//    the model's prefix; `<layer>.scale_weight` becomes the layer's weight scale (W = q * scale),
//    `<layer>.scale_input` its input scale; the layers are Linear ones.
//  - ComfyUI comfy_quant (`comfy/ops.py` MixedPrecisionOps, `comfy/quant_ops.py` QUANT_ALGOS):
//    `<layer>.comfy_quant` (U8 bytes of a JSON object with "format") or the header entry
//    `_quantization_metadata` = {"layers": {layer: {"format": ...}}}; `<layer>.weight_scale`,
//    optional `<layer>.input_scale`; float8 formats dequantise as q * weight_scale.
//  - NVIDIA ModelOpt / compressed-tensors: `.weight_scale` per tensor or per output channel
//    ([out, 1]), `.input_scale`; `weight_scale_2` marks NVFP4's second-level scale.
//  - FP8 Studio's own older files: `<layer>.scale_weight`, [1] or [out], and `fp8s.quantization`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fp8/quant_formats.h"
#include "io/safetensors.h"

namespace fp8s {

// Where the scale of the weight `weight_key` is, in any spelling the readers use
// (`<m>.scale_weight`, `<m>.weight_scale`, `<m>.weight_scale_inv`; for `<m>.in_proj_weight`:
// `<m>.in_proj_scale_weight`, `<m>.in_proj_weight_scale`); "" when the file has none.
std::string find_scale_key(const std::function<bool(const std::string&)>& has, const std::string& weight_key);
// The same for the activation scale (`<m>.scale_input`, `<m>.input_scale`).
std::string find_input_scale_key(const std::function<bool(const std::string&)>& has, const std::string& weight_key);
// Whether a tensor name is a scale of another tensor (any spelling above, input scales included).
bool is_scale_name(const std::string& name);
// Whether a tensor name is an activation scale (`.scale_input`, `.input_scale`).
bool is_input_scale_name(const std::string& name);
// Tensors that describe quantisation and hold no model value: `.comfy_quant` and the `scaled_fp8`
// marker (at any prefix).
bool is_quantisation_marker(const std::string& name);

// What the file's FP8 tensors follow, for inspect, the Model panel and the load log.
struct Fp8FileScheme {
  std::string layout;            // "" (no FP8), "plain F8", "ComfyUI scaled_fp8", "ComfyUI comfy_quant", ...
  uint64_t fp8_tensors = 0;      // F8_E4M3/F8_E5M2 tensors of any role
  uint64_t scaled_weights = 0;   // F8 weights that have a scale
  uint64_t channel_scaled = 0;   // of which per output channel
  uint64_t input_scales = 0;
  // comfy_quant layers by format label ("NVFP4", "INT8 ConvRot", "FP8 E4M3", ...)
  std::map<std::string, uint64_t> formats;
};

// The comfy_quant description of the layer whose weight is `weight_key` (`<layer>.weight`): its
// `<layer>.comfy_quant` tensor, else the header's `_quantization_metadata` entry; nullopt when
// the file gives none. Throws InputError naming the layer for a damaged or unknown description.
std::optional<QuantLayerConf> comfy_quant_layer(const SafetensorsFile& file, const std::string& weight_key);
// Whether a comfy_quant format is held as a BlockWeight (every one but float8).
inline bool is_block_format(QuantFormat f) { return f != QuantFormat::Float8E4M3 && f != QuantFormat::Float8E5M2; }
// The names a comfy_quant layer may hold beside `<layer>.weight` (`weight_scale`, `weight_scale_2`,
// `weight_zeros`, `weight_proj_down`, `weight_proj_up`, `weight_smooth_factor`, `input_scale`,
// `pre_quant_scale`, `comfy_quant`).
const std::vector<std::string>& comfy_quant_parts();

// Reads the quantisation description of a parsed header; `bytes` returns a (small) tensor's data
// (the `.comfy_quant` JSON). Throws InputError naming the layer and the format for what cannot run
// here: NVFP4, MXFP8 (F8_E8M0 scales), int8 and 4-bit weights outside comfy_quant layers,
// bitsandbytes, block-scaled FP8, a comfy_quant format it cannot decode; and for damaged
// descriptions.
Fp8FileScheme read_fp8_scheme(const SafetensorsIndex& index,
                              const std::function<std::vector<uint8_t>(const TensorRecord&)>& bytes,
                              const std::string& label);
Fp8FileScheme read_fp8_scheme(const SafetensorsFile& file);

}  // namespace fp8s
