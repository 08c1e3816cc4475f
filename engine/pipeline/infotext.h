// A1111 `parameters` text ("infotext"): written into every PNG, read back from dropped images.
// Free of LibTorch (the fuzz target links it alone).
#pragma once

#include <cstdint>
#include <string>

#include "pipeline/request.h"

namespace fp8s {

// The A1111 `parameters` text of an image.
std::string format_infotext(const GenerationRequest& request, uint64_t seed,
                            const std::string& model_name, const std::string& model_hash,
                            int width, int height);
// The request's LoRA fields (", LoRA: \"name: mult, ...\", LoRA mode: ..."; "" without LoRAs), which
// SD's and Flux's infotext share.
std::string lora_infotext_fields(const GenerationRequest& request);
// ", ControlNet 0: \"Module: canny, Model: NAME, Weight: 1, Resize Mode: Crop and Resize, Threshold A:
// 100, Threshold B: 200, Guidance Start: 0, Guidance End: 1, Control Mode: Balanced\"" per unit
// (sd-webui-controlnet's fields; the model by its file name without .safetensors), "" without units.
std::string controlnet_infotext_fields(const GenerationRequest& request);
// ", Seed: S, Size: WxH, Model hash: H, Model: NAME" (no hash field when `model_hash` is empty).
std::string seed_model_infotext_fields(uint64_t seed, int width, int height, const std::string& model_name,
                                       const std::string& model_hash);
// ", FP8 weight: fp8-e4m3" or ", FP8 weight: Disable" (Forge's field).
std::string fp8_weight_infotext_field(const GenerationRequest& request);
// ", Weights: STORAGE, Compute: TYPE": ours, which reading the text back restores.
std::string storage_infotext_fields(const GenerationRequest& request);
// The img2img, inpainting and hires fields (A1111's names) of a first pass of `width` x `height`.
std::string image_infotext_fields(const GenerationRequest& request, int width, int height);

// Reads A1111 `parameters` text back into a request (prompt, negative, steps, sampler, CFG,
// seed, size, clip skip); unknown fields are ignored. Throws InputError when it is not infotext.
GenerationRequest parse_infotext(const std::string& text);
// A PNG's image and the request its A1111 parameters describe; InputError when it has none.
struct PngRequest {
  RgbImage image;
  GenerationRequest request;
  bool has_storage = false;  // the text names the storage and compute (ours do, A1111's do not)
};
PngRequest read_png_request(const std::string& path);

}  // namespace fp8s
