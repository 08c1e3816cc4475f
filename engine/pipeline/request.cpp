#include "pipeline/request.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "text/prompt_parser.h"

namespace fp8s {

int64_t resolve_seed(int64_t seed) {
  return seed >= 0 ? seed : static_cast<int64_t>(std::random_device{}() & 0xFFFFFFFFu);
}

namespace {
bool multiplier_ok(double m) { return std::isfinite(m) && std::fabs(m) <= 100; }
}  // namespace

void validate_loras(const std::vector<LoraRequest>& loras) {
  for (const auto& l : loras) {
    if (!multiplier_ok(l.unet_multiplier) || !multiplier_ok(l.te_multiplier)) {
      throw InputError(l.path + ": the LoRA multiplier must be a number from -100 to 100");
    }
  }
}

int GenerationRequest::hr_target_width(int w) const {
  if (hr_width > 0) return hr_width / 8 * 8;
  if (hr_height > 0) return static_cast<int>(static_cast<int64_t>(w) * hr_height / std::max(1, height ? height : w)) / 8 * 8;
  return static_cast<int>(w * hr_scale) / 8 * 8;
}

int GenerationRequest::hr_target_height(int h) const {
  if (hr_height > 0) return hr_height / 8 * 8;
  if (hr_width > 0) return static_cast<int>(static_cast<int64_t>(h) * hr_width / std::max(1, width ? width : h)) / 8 * 8;
  return static_cast<int>(h * hr_scale) / 8 * 8;
}

namespace {

void check_size(int v, const char* name, int multiple = 8, int min_size = 64) {
  if (v < min_size || v > 4096) {
    throw InputError(std::string(name) + " " + std::to_string(v) + " is outside " + std::to_string(min_size) + "..4096 pixels");
  }
  if (v % multiple != 0) {
    throw InputError(std::string(name) + " " + std::to_string(v) + " is not a multiple of " + std::to_string(multiple) +
                     "; use e.g. " + std::to_string(std::max(min_size, (v + multiple / 2) / multiple * multiple)));
  }
}

void check_fraction(float v, const char* what) {
  if (!std::isfinite(v) || v < 0 || v > 1) throw InputError(std::string(what) + " must be between 0 and 1");
}

}  // namespace

void validate_image_inputs(const GenerationRequest& r, int w, int h, int multiple, int min_size) {
  if (r.init_image) {
    const auto& im = *r.init_image;
    if (im.width < 8 || im.height < 8 || im.pixels.size() != static_cast<std::size_t>(im.width) * im.height * 3) {
      throw InputError("the init image is empty or smaller than 8x8 pixels");
    }
    check_fraction(r.denoising_strength, "denoising strength");
    if (r.enable_hr) throw InputError("hires fix is for txt2img; with an init image use the size you want instead");
  }
  if (r.mask) {
    if (!r.init_image) throw InputError("a mask needs an init image (--init-image) to inpaint");
    if (r.mask->width != r.init_image->width || r.mask->height != r.init_image->height) {
      throw InputError("the mask is " + std::to_string(r.mask->width) + "x" + std::to_string(r.mask->height) +
                       " but the init image is " + std::to_string(r.init_image->width) + "x" +
                       std::to_string(r.init_image->height) + "; they must be the same size");
    }
    if (r.mask_blur < 0 || r.mask_blur > 64) throw InputError("mask blur must be between 0 and 64 pixels");
    if (r.inpaint_full_res_padding < 0 || r.inpaint_full_res_padding > 1024) {
      throw InputError("inpaint padding must be between 0 and 1024 pixels");
    }
  }
  if (r.enable_hr) {
    if (!std::isfinite(r.hr_scale) || r.hr_scale < 1 || r.hr_scale > 4) throw InputError("hires scale must be between 1 and 4");
    if (r.hr_width < 0 || r.hr_height < 0) throw InputError("the hires size must be positive");
    check_size(r.hr_target_width(w), "hires width", multiple, min_size);
    check_size(r.hr_target_height(h), "hires height", multiple, min_size);
    if (r.hr_steps < 0 || r.hr_steps > 1000) throw InputError("hires steps must be between 0 (= steps) and 1000");
    check_fraction(r.hr_denoising_strength, "hires denoising strength");
    // a low strength stretches the schedule: DDIM's uniform timesteps need a step of at least one
    // training timestep, and no sampler has more timesteps than the model was trained on
    const int hr_steps = r.hr_steps ? r.hr_steps : r.steps;
    const double length = hires_schedule_length(hr_steps, r.hr_denoising_strength);
    if (length > kTrainingTimesteps) {
      throw InputError("hires steps " + std::to_string(hr_steps) + " at denoising strength " +
                       std::to_string(r.hr_denoising_strength).substr(0, 5) + " need a schedule of " +
                       std::to_string(static_cast<long long>(std::min(length, 1e15))) + " steps, more than the model's " +
                       std::to_string(kTrainingTimesteps) + " timesteps; raise the strength to at least " +
                       std::to_string(static_cast<double>(hr_steps) / kTrainingTimesteps).substr(0, 5) +
                       " or lower the hires steps");
    }
  }
}

double hires_schedule_length(int steps, float strength) {
  const double s = std::min(static_cast<double>(strength), 0.999);
  return s > 0 ? std::floor(steps / s) : steps;
}

int request_width(const GenerationRequest& r, int native_size, int multiple, int min_size) {
  if (r.width) return r.width;
  return r.init_image ? std::max(min_size, r.init_image->width / multiple * multiple) : native_size;
}

int request_height(const GenerationRequest& r, int native_size, int multiple, int min_size) {
  if (r.height) return r.height;
  return r.init_image ? std::max(min_size, r.init_image->height / multiple * multiple) : native_size;
}

void validate_request(const GenerationRequest& r, int native_size, int multiple, int min_size) {
  const int w = request_width(r, native_size, multiple, min_size);
  const int h = request_height(r, native_size, multiple, min_size);
  check_size(w, "width", multiple, min_size);
  check_size(h, "height", multiple, min_size);
  if (r.steps < 1 || r.steps > 1000) throw InputError("steps must be between 1 and 1000");
  if (!std::isfinite(r.cfg) || r.cfg < 0 || r.cfg > 100) throw InputError("CFG scale must be between 0 and 100");
  if (r.batch_size < 1 || r.batch_size > 64) throw InputError("batch size must be between 1 and 64");
  if (r.batch_count < 1 || r.batch_count > 10000) throw InputError("batch count must be between 1 and 10000");
  if (r.clip_skip < 1) throw InputError("clip skip must be at least 1 (1: the last layer)");
  validate_image_inputs(r, w, h, multiple, min_size);
  validate_loras(r.loras);
  validate_lora_tags(r.prompt);
  validate_controlnets(r.controlnets);
}

void validate_controlnets(const std::vector<ControlUnit>& units) {
  if (units.size() > 3) throw InputError("at most 3 ControlNet units (" + std::to_string(units.size()) + " given)");
  for (std::size_t i = 0; i < units.size(); ++i) {
    const auto& u = units[i];
    const std::string unit = "ControlNet " + std::to_string(i) + ": ";
    if (u.model.empty()) throw InputError(unit + "no model; pass --controlnet FILE");
    if (!u.image || u.image->width < 1 || u.image->height < 1) throw InputError(unit + "no control image; pass --control-image PNG");
    if (!(u.strength >= 0 && u.strength <= 2)) throw InputError(unit + "--control-strength must be between 0 and 2");
    if (!(u.start >= 0 && u.start <= 1) || !(u.end >= 0 && u.end <= 1) || u.start > u.end) {
      throw InputError(unit + "--control-start and --control-end must be between 0 and 1, start <= end");
    }
    if (u.canny_low < 1 || u.canny_high > 255 || u.canny_low > u.canny_high) {
      throw InputError(unit + "the Canny thresholds must be 1 <= low <= high <= 255");
    }
  }
}

void validate_lora_tags(const std::string& prompt) {
  for (const auto& tag : parse_extra_networks(prompt).loras) {
    if (!tag.error.empty()) throw InputError(tag.error);
    if (!multiplier_ok(tag.te_multiplier) || !multiplier_ok(tag.unet_multiplier)) {
      throw InputError("<lora:" + tag.name + ">: the LoRA multiplier must be a number from -100 to 100");
    }
  }
}

uint64_t estimate_working_bytes(const UNetConfig& u, const VaeConfig& v, int width, int height, int batch_size,
                                ComputeType compute, int64_t attention_budget_bytes) {
  const double b = compute == ComputeType::FP32 ? 4.0 : 2.0;
  const double n = 2.0 * batch_size;  // the conditional and unconditional halves of CFG
  const double hw = (width / 8.0) * (height / 8.0);
  // UNet: the skip connections kept for the decoder, plus about ten level-0 tensors in flight
  // (resnet temporaries, GEGLU's 8x-wide feed-forward), plus the attention slice budget.
  double unet = 10.0 * u.model_channels * u.channel_mult.at(0) * hw * n * b;
  double level_hw = hw;
  for (int m : u.channel_mult) {
    unet += (u.num_res_blocks + 1.0) * u.model_channels * m * level_hw * n * b;
    level_hw /= 4;
  }
  unet += static_cast<double>(attention_budget_bytes);
  // VAE decode of the whole batch: about four full-resolution tensors of the last block's channels, FP32.
  const double vae = 4.0 * v.ch * (v.ch_mult.empty() ? 1 : v.ch_mult.front()) * (width * static_cast<double>(height)) * batch_size * 4.0;
  return static_cast<uint64_t>(std::max(unet, vae));
}

}  // namespace fp8s
