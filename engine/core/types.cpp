// The names and parsers of the user-choice enums (core/types.h), in one LibTorch-free file that the
// CLI, the GUI, infotext and the fuzz targets share. Each enum's spellings are one table.
#include "core/types.h"

#include <utility>

namespace fp8s {
namespace {

template <class E, std::size_t N>
using Names = std::pair<E, const char*>[N];

template <class E, std::size_t N>
const char* name_in(const Names<E, N>& table, E value) {
  for (const auto& [e, n] : table) {
    if (e == value) return n;
  }
  return table[0].second;
}

template <class E, std::size_t N>
std::optional<E> parse_in(const Names<E, N>& table, const std::string& name) {
  for (const auto& [e, n] : table) {
    if (name == n) return e;
  }
  return std::nullopt;
}

// Our spelling or the display one (A1111's).
template <class E, std::size_t N, std::size_t M>
std::optional<E> parse_either(const Names<E, N>& ours, const Names<E, M>& display, const std::string& name) {
  if (auto e = parse_in(ours, name)) return e;
  return parse_in(display, name);
}

constexpr Names<WeightType, 8> kWeights = {{WeightType::FP32, "fp32"},       {WeightType::FP16, "fp16"},
                                           {WeightType::BF16, "bf16"},       {WeightType::FP8_E4M3, "fp8-e4m3"},
                                           {WeightType::FP8_E5M2, "fp8-e5m2"}, {WeightType::INT8, "int8"},
                                           {WeightType::MXFP8, "mxfp8"},     {WeightType::NVFP4, "nvfp4"}};
constexpr Names<WeightType, 8> kWeightDisplay = {{WeightType::FP32, "FP32"},         {WeightType::FP16, "FP16"},
                                                 {WeightType::BF16, "BF16"},         {WeightType::FP8_E4M3, "FP8 E4M3"},
                                                 {WeightType::FP8_E5M2, "FP8 E5M2"}, {WeightType::INT8, "INT8"},
                                                 {WeightType::MXFP8, "MXFP8"},       {WeightType::NVFP4, "NVFP4"}};
constexpr Names<LoraMode, 4> kLoraModes = {{LoraMode::Auto, "auto"}, {LoraMode::Merge, "merge"},
                                           {LoraMode::MergeStochastic, "merge-stochastic"}, {LoraMode::Online, "online"}};
constexpr Names<ComputeType, 4> kComputes = {{ComputeType::FP32, "fp32"}, {ComputeType::BF16, "bf16"}, {ComputeType::FP16, "fp16"},
                                             {ComputeType::Auto, "auto"}};
constexpr Names<Fp8Scale, 3> kScales = {{Fp8Scale::None, "none"}, {Fp8Scale::Tensor, "tensor"}, {Fp8Scale::Channel, "channel"}};
// the first spelling of each is the name; the others are accepted (A1111's "Automatic" schedule)
constexpr Names<Schedule, 5> kSchedules = {{Schedule::Normal, "normal"}, {Schedule::Karras, "karras"}, {Schedule::Normal, "Normal"},
                                           {Schedule::Normal, "Automatic"}, {Schedule::Karras, "Karras"}};
constexpr Names<Sampler, 7> kSamplers = {{Sampler::Euler, "euler"}, {Sampler::EulerAncestral, "euler_ancestral"},
                                         {Sampler::Heun, "heun"}, {Sampler::DpmPP2M, "dpmpp_2m"}, {Sampler::Ddim, "ddim"},
                                         {Sampler::Lcm, "lcm"}, {Sampler::EulerAncestral, "euler_a"}};
constexpr Names<Sampler, 6> kSamplerDisplay = {{Sampler::Euler, "Euler"}, {Sampler::EulerAncestral, "Euler a"},
                                               {Sampler::Heun, "Heun"}, {Sampler::DpmPP2M, "DPM++ 2M"}, {Sampler::Ddim, "DDIM"},
                                               {Sampler::Lcm, "LCM"}};
constexpr Names<ResizeMode, 3> kResizeModes = {{ResizeMode::JustResize, "just-resize"}, {ResizeMode::Crop, "crop"}, {ResizeMode::Fill, "fill"}};
constexpr Names<InpaintFill, 4> kFills = {{InpaintFill::Fill, "fill"}, {InpaintFill::Original, "original"},
                                          {InpaintFill::LatentNoise, "latent-noise"}, {InpaintFill::LatentNothing, "latent-nothing"}};
constexpr Names<HrUpscaler, 3> kUpscalers = {{HrUpscaler::Latent, "latent"}, {HrUpscaler::LatentNearest, "latent-nearest"},
                                             {HrUpscaler::Lanczos, "lanczos"}};
constexpr Names<HrUpscaler, 3> kUpscalerDisplay = {{HrUpscaler::Latent, "Latent"}, {HrUpscaler::LatentNearest, "Latent (nearest)"},
                                                   {HrUpscaler::Lanczos, "Lanczos"}};

}  // namespace

const char* weight_type_name(WeightType type) { return name_in(kWeights, type); }
std::optional<WeightType> parse_weight_type(const std::string& name) { return parse_in(kWeights, name); }
const std::vector<std::string>& weight_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [type, name] : kWeights) out.emplace_back(name);
    return out;
  }();
  return names;
}
bool is_fp8(WeightType type) { return type == WeightType::FP8_E4M3 || type == WeightType::FP8_E5M2; }
bool is_block_storage(WeightType type) { return type == WeightType::INT8 || type == WeightType::MXFP8 || type == WeightType::NVFP4; }
bool is_quantised(WeightType type) { return is_fp8(type) || is_block_storage(type); }
double stored_bytes_per_weight(WeightType type) {
  switch (type) {
    case WeightType::FP32: return 4.0;
    case WeightType::FP16:
    case WeightType::BF16: return 2.0;
    case WeightType::MXFP8: return 1.0 + 1.0 / 32;
    case WeightType::NVFP4: return 0.5 + 1.0 / 16;
    default: return 1.0;
  }
}
Fp8Format fp8_format(WeightType type) { return type == WeightType::FP8_E5M2 ? Fp8Format::E5M2 : Fp8Format::E4M3FN; }

const char* lora_mode_name(LoraMode mode) { return name_in(kLoraModes, mode); }
std::optional<LoraMode> parse_lora_mode(const std::string& name) { return parse_in(kLoraModes, name); }
const char* compute_type_name(ComputeType type) { return name_in(kComputes, type); }
std::optional<ComputeType> parse_compute_type(const std::string& name) { return parse_in(kComputes, name); }
const char* fp8_scale_name(Fp8Scale scale) { return name_in(kScales, scale); }
std::optional<Fp8Scale> parse_fp8_scale(const std::string& name) { return parse_in(kScales, name); }
const char* schedule_name(Schedule s) { return name_in(kSchedules, s); }
std::optional<Schedule> parse_schedule(const std::string& name) { return parse_in(kSchedules, name); }

const char* sampler_name(Sampler s) { return name_in(kSamplers, s); }
const char* sampler_display_name(Sampler s) { return name_in(kSamplerDisplay, s); }
std::optional<Sampler> parse_sampler(const std::string& name) { return parse_either(kSamplers, kSamplerDisplay, name); }

std::string storage_display_name(const StorageSpec& storage) {
  std::string s = name_in(kWeightDisplay, storage.weights);
  if (is_fp8(storage.weights) && storage.scale != Fp8Scale::None) s += std::string(" /") + fp8_scale_name(storage.scale);
  if (storage.fp8_vae) s += " +VAE";
  return s;
}

constexpr Names<ControlPreprocessor, 3> kPreprocessors = {
    {ControlPreprocessor::None, "none"}, {ControlPreprocessor::Invert, "invert"}, {ControlPreprocessor::Canny, "canny"}};
constexpr Names<ControlMode, 3> kControlModes = {
    {ControlMode::Balanced, "balanced"}, {ControlMode::Prompt, "prompt"}, {ControlMode::ControlNet, "controlnet"}};
constexpr Names<ControlMode, 3> kControlModeDisplay = {{ControlMode::Balanced, "Balanced"},
                                                       {ControlMode::Prompt, "My prompt is more important"},
                                                       {ControlMode::ControlNet, "ControlNet is more important"}};
constexpr Names<ResizeMode, 3> kResizeDisplay = {
    {ResizeMode::JustResize, "Just Resize"}, {ResizeMode::Crop, "Crop and Resize"}, {ResizeMode::Fill, "Resize and Fill"}};
const char* control_preprocessor_name(ControlPreprocessor p) { return name_in(kPreprocessors, p); }
std::optional<ControlPreprocessor> parse_control_preprocessor(const std::string& name) { return parse_in(kPreprocessors, name); }
const char* control_mode_display_name(ControlMode m) { return name_in(kControlModeDisplay, m); }
std::optional<ControlMode> parse_control_mode(const std::string& name) { return parse_either(kControlModes, kControlModeDisplay, name); }
const char* resize_mode_display_name(ResizeMode mode) { return name_in(kResizeDisplay, mode); }
std::optional<ResizeMode> parse_resize_mode(const std::string& name) { return parse_in(kResizeModes, name); }
std::optional<InpaintFill> parse_inpaint_fill(const std::string& name) { return parse_in(kFills, name); }
const char* hr_upscaler_display_name(HrUpscaler u) { return name_in(kUpscalerDisplay, u); }
std::optional<HrUpscaler> parse_hr_upscaler(const std::string& name) { return parse_either(kUpscalers, kUpscalerDisplay, name); }

}  // namespace fp8s
