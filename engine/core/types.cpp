// The names and parsers of the user-choice enums (core/types.h, and Fp8Scale from fp8/quantize.h),
// in one LibTorch-free file that the CLI, the GUI, infotext and the fuzz targets share.
#include "core/types.h"

namespace fp8s {

const char* weight_type_name(WeightType type) {
  switch (type) {
    case WeightType::FP32: return "fp32";
    case WeightType::FP16: return "fp16";
    case WeightType::BF16: return "bf16";
    case WeightType::FP8_E4M3: return "fp8-e4m3";
    case WeightType::FP8_E5M2: return "fp8-e5m2";
  }
  return "fp32";
}

std::optional<WeightType> parse_weight_type(const std::string& name) {
  for (auto t : {WeightType::FP32, WeightType::FP16, WeightType::BF16, WeightType::FP8_E4M3,
                 WeightType::FP8_E5M2}) {
    if (name == weight_type_name(t)) return t;
  }
  return std::nullopt;
}

bool is_fp8(WeightType type) { return type == WeightType::FP8_E4M3 || type == WeightType::FP8_E5M2; }
Fp8Format fp8_format(WeightType type) { return type == WeightType::FP8_E5M2 ? Fp8Format::E5M2 : Fp8Format::E4M3FN; }

const char* lora_mode_name(LoraMode mode) {
  switch (mode) {
    case LoraMode::Auto: return "auto";
    case LoraMode::Merge: return "merge";
    case LoraMode::MergeStochastic: return "merge-stochastic";
    case LoraMode::Online: return "online";
  }
  return "auto";
}

std::optional<LoraMode> parse_lora_mode(const std::string& name) {
  for (auto m : {LoraMode::Auto, LoraMode::Merge, LoraMode::MergeStochastic, LoraMode::Online}) {
    if (name == lora_mode_name(m)) return m;
  }
  return std::nullopt;
}

const char* compute_type_name(ComputeType type) {
  switch (type) {
    case ComputeType::FP32: return "fp32";
    case ComputeType::BF16: return "bf16";
    case ComputeType::FP16: return "fp16";
  }
  return "fp32";
}

std::optional<ComputeType> parse_compute_type(const std::string& name) {
  if (name == "fp32") return ComputeType::FP32;
  if (name == "bf16") return ComputeType::BF16;
  if (name == "fp16") return ComputeType::FP16;
  return std::nullopt;
}

const char* fp8_scale_name(Fp8Scale scale) {
  switch (scale) {
    case Fp8Scale::None: return "none";
    case Fp8Scale::Tensor: return "tensor";
    case Fp8Scale::Channel: return "channel";
  }
  return "none";
}

std::optional<Fp8Scale> parse_fp8_scale(const std::string& name) {
  if (name == "none") return Fp8Scale::None;
  if (name == "tensor") return Fp8Scale::Tensor;
  if (name == "channel") return Fp8Scale::Channel;
  return std::nullopt;
}

const char* schedule_name(Schedule s) { return s == Schedule::Karras ? "karras" : "normal"; }

std::optional<Schedule> parse_schedule(const std::string& name) {
  if (name == "normal" || name == "Normal" || name == "Automatic") return Schedule::Normal;
  if (name == "karras" || name == "Karras") return Schedule::Karras;
  return std::nullopt;
}

const char* sampler_name(Sampler s) {
  switch (s) {
    case Sampler::Euler: return "euler";
    case Sampler::EulerAncestral: return "euler_ancestral";
    case Sampler::Heun: return "heun";
    case Sampler::DpmPP2M: return "dpmpp_2m";
    case Sampler::Ddim: return "ddim";
    case Sampler::Lcm: return "lcm";
  }
  return "euler";
}

const char* sampler_display_name(Sampler s) {
  switch (s) {
    case Sampler::Euler: return "Euler";
    case Sampler::EulerAncestral: return "Euler a";
    case Sampler::Heun: return "Heun";
    case Sampler::DpmPP2M: return "DPM++ 2M";
    case Sampler::Ddim: return "DDIM";
    case Sampler::Lcm: return "LCM";
  }
  return "Euler";
}

std::optional<Sampler> parse_sampler(const std::string& name) {
  for (auto s : {Sampler::Euler, Sampler::EulerAncestral, Sampler::Heun, Sampler::DpmPP2M,
                 Sampler::Ddim, Sampler::Lcm}) {
    if (name == sampler_name(s) || name == sampler_display_name(s)) return s;
  }
  if (name == "euler_a") return Sampler::EulerAncestral;
  return std::nullopt;
}

std::string storage_display_name(const StorageSpec& storage) {
  std::string s;
  switch (storage.weights) {
    case WeightType::FP32: s = "FP32"; break;
    case WeightType::FP16: s = "FP16"; break;
    case WeightType::BF16: s = "BF16"; break;
    case WeightType::FP8_E4M3: s = "FP8 E4M3"; break;
    case WeightType::FP8_E5M2: s = "FP8 E5M2"; break;
  }
  if (is_fp8(storage.weights) && storage.scale != Fp8Scale::None) s += std::string(" /") + fp8_scale_name(storage.scale);
  if (storage.fp8_vae) s += " +VAE";
  return s;
}

}  // namespace fp8s
