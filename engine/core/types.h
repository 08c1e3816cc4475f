// The enums that name user choices (storage, compute, sampler, schedule), free of LibTorch so
// front ends can include them cheaply. Their names and parsers are in core/types.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fp8s {

// The two OCP FP8 formats (the codec: fp8/codec.h) and how FP8 weights are scaled (docs/architecture.md,
// "Number formats"; the quantiser: fp8/quantize.h).
enum class Fp8Format { E4M3FN, E5M2 };
enum class Fp8Scale { None, Tensor, Channel };
const char* fp8_scale_name(Fp8Scale scale);  // "none" / "tensor" / "channel"
std::optional<Fp8Scale> parse_fp8_scale(const std::string& name);

// How weights are kept in memory (docs/architecture.md, "Number formats").
// INT8 (per-row scales), MXFP8 and NVFP4 are ComfyUI's comfy_quant layouts (fp8/quant_formats.h),
// quantised at load from 16-bit weights as FP8 is; a layer of a file already in such a format is
// kept as stored under any storage type.
enum class WeightType { FP32, FP16, BF16, FP8_E4M3, FP8_E5M2, INT8, MXFP8, NVFP4 };
const char* weight_type_name(WeightType type);  // the --weights spelling
std::optional<WeightType> parse_weight_type(const std::string& name);
// Every --weights spelling, in order ("fp32, fp16, ..., nvfp4"): for help texts and messages.
const std::vector<std::string>& weight_type_names();
bool is_fp8(WeightType type);
// A storage type that quantises weights at load: FP8, INT8, MXFP8, NVFP4.
bool is_quantised(WeightType type);
// INT8, MXFP8, NVFP4: held as a comfy_quant block layer (models/weight_store.h BlockWeight).
bool is_block_storage(WeightType type);
// Bytes a weight takes in the type, scales included (MXFP8 1 + 1/32, NVFP4 1/2 + 1/16; padding not counted).
double stored_bytes_per_weight(WeightType type);
Fp8Format fp8_format(WeightType type);  // E5M2 for FP8_E5M2, E4M3FN otherwise

struct StorageSpec {
  WeightType weights = WeightType::FP32;
  Fp8Scale scale = Fp8Scale::None;
  bool fp8_vae = false;
  bool operator==(const StorageSpec& o) const {
    return weights == o.weights && scale == o.scale && fp8_vae == o.fp8_vae;
  }
  bool operator!=(const StorageSpec& o) const { return !(*this == o); }
};

// How the GUI's legends and tables name a storage choice: "FP16", "FP8 E4M3 /tensor +VAE".
std::string storage_display_name(const StorageSpec& storage);

// Auto: chosen from the processor at run time (core/compute_choice.h); every other value is a type.
enum class ComputeType { FP32, BF16, FP16, Auto };
const char* compute_type_name(ComputeType type);
std::optional<ComputeType> parse_compute_type(const std::string& name);

enum class Schedule { Normal, Karras };
const char* schedule_name(Schedule s);
std::optional<Schedule> parse_schedule(const std::string& name);

enum class Sampler { Euler, EulerAncestral, Heun, DpmPP2M, Ddim, Lcm };
const char* sampler_name(Sampler s);          // euler, euler_ancestral, ...
const char* sampler_display_name(Sampler s);  // A1111's: "Euler a", "DPM++ 2M", ...
std::optional<Sampler> parse_sampler(const std::string& name);  // also accepts A1111's names

// img2img's resize modes (A1111's "Just resize", "Crop and resize", "Resize and fill").
enum class ResizeMode { JustResize, Crop, Fill };
std::optional<ResizeMode> parse_resize_mode(const std::string& name);

// What the masked area starts from (A1111's "Masked content": fill, original, latent noise,
// latent nothing).
enum class InpaintFill { Fill, Original, LatentNoise, LatentNothing };
std::optional<InpaintFill> parse_inpaint_fill(const std::string& name);

// Hires fix upscalers: the latent bilinear (A1111 "Latent") or nearest ("Latent (nearest)"), or the
// decoded image resized with Lanczos and encoded again ("Lanczos").
enum class HrUpscaler { Latent, LatentNearest, Lanczos };
const char* hr_upscaler_display_name(HrUpscaler u);  // A1111's: "Latent", "Latent (nearest)", "Lanczos"
std::optional<HrUpscaler> parse_hr_upscaler(const std::string& name);  // also A1111's names

// A ControlNet's preprocessor (the control image as given, inverted, or Canny's edges) and A1111's
// control modes ("Balanced": both CFG halves controlled; "My prompt is more important": the
// residuals scaled by 0.825^(K − i); "ControlNet is more important": the uncond half uncontrolled).
enum class ControlPreprocessor { None, Invert, Canny };
const char* control_preprocessor_name(ControlPreprocessor p);  // none, invert, canny
std::optional<ControlPreprocessor> parse_control_preprocessor(const std::string& name);
enum class ControlMode { Balanced, Prompt, ControlNet };
const char* control_mode_display_name(ControlMode m);  // A1111's: "Balanced", "My prompt is more important", ...
std::optional<ControlMode> parse_control_mode(const std::string& name);  // also A1111's names
const char* resize_mode_display_name(ResizeMode mode);  // A1111's: "Just Resize", "Crop and Resize", "Resize and Fill"

// How a LoRA is applied: merged into the weights (round to nearest, or stochastic rounding as
// ComfyUI does), or kept as factors added at forward time. Auto: online for FP8 storage.
enum class LoraMode { Auto, Merge, MergeStochastic, Online };
const char* lora_mode_name(LoraMode mode);
std::optional<LoraMode> parse_lora_mode(const std::string& name);

}  // namespace fp8s
