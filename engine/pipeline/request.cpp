#include "pipeline/request.h"

#include <cmath>
#include <random>

#include "core/error.h"
#include "text/prompt_parser.h"

namespace fp8s {

int64_t resolve_seed(int64_t seed) {
  return seed >= 0 ? seed : static_cast<int64_t>(std::random_device{}() & 0xFFFFFFFFu);
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Load: return "load";
    case Phase::Encode: return "encode";
    case Phase::Sample: return "sample";
    case Phase::Decode: return "decode";
    case Phase::Done: return "done";
  }
  return "load";
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

void validate_request(const GenerationRequest& r, int native_size, int text_layers) {
  const int w = r.width ? r.width : native_size;
  const int h = r.height ? r.height : native_size;
  for (auto [v, name] : {std::pair{w, "width"}, std::pair{h, "height"}}) {
    if (v < 64 || v > 4096) {
      throw InputError(std::string(name) + " " + std::to_string(v) + " is outside 64..4096 pixels");
    }
    if (v % 8 != 0) {
      throw InputError(std::string(name) + " " + std::to_string(v) +
                       " is not a multiple of 8; use e.g. " + std::to_string((v + 4) / 8 * 8));
    }
  }
  if (r.steps < 1 || r.steps > 1000) throw InputError("steps must be between 1 and 1000");
  if (!std::isfinite(r.cfg) || r.cfg < 0 || r.cfg > 100) throw InputError("CFG scale must be between 0 and 100");
  if (r.batch_size < 1 || r.batch_size > 64) throw InputError("batch size must be between 1 and 64");
  if (r.batch_count < 1 || r.batch_count > 10000) throw InputError("batch count must be between 1 and 10000");
  if (r.clip_skip < 1 || r.clip_skip > text_layers) {
    throw InputError("clip skip must be between 1 and " + std::to_string(text_layers) + " (the text encoder's layers)");
  }
  const auto& s = r.size;
  for (int v : {s.original_width, s.original_height, s.target_width, s.target_height, s.crop_top, s.crop_left}) {
    if (v < 0 || v > 65536) throw InputError("SDXL size conditioning values must be between 0 and 65536");
  }
  validate_loras(r.loras);
  for (const auto& tag : parse_extra_networks(r.prompt).loras) {
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
