#include "pipeline/request.h"

#include <cmath>

#include "core/error.h"

namespace fp8s {

void validate_request(const GenerationRequest& r, int native_size) {
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
  if (r.clip_skip < 1 || r.clip_skip > 12) throw InputError("clip skip must be between 1 and 12");
  const auto& s = r.size;
  for (int v : {s.original_width, s.original_height, s.target_width, s.target_height, s.crop_top, s.crop_left}) {
    if (v < 0 || v > 65536) throw InputError("SDXL size conditioning values must be between 0 and 65536");
  }
  for (const auto& l : r.loras) {
    if (!std::isfinite(l.unet_multiplier) || !std::isfinite(l.te_multiplier) || std::fabs(l.unet_multiplier) > 100 ||
        std::fabs(l.te_multiplier) > 100) {
      throw InputError(l.path + ": the LoRA multiplier must be a number from -100 to 100");
    }
  }
}

uint64_t estimate_working_bytes(const ActivationShape& a, int width, int height, int batch_size, ComputeType compute) {
  const double b = compute == ComputeType::FP32 ? 4.0 : 2.0;
  const double n = 2.0 * batch_size;  // the conditional and unconditional halves of CFG
  const double hw = (width / 8.0) * (height / 8.0);
  // UNet: the skip connections kept for the decoder, plus about ten level-0 tensors in flight
  // (resnet temporaries, GEGLU's 8x-wide feed-forward), plus the attention slice budget.
  double unet = 10.0 * a.unet_channels * a.unet_mult.at(0) * hw * n * b;
  double level_hw = hw;
  for (int m : a.unet_mult) {
    unet += (a.unet_res_blocks + 1.0) * a.unet_channels * m * level_hw * n * b;
    level_hw /= 4;
  }
  unet += static_cast<double>(a.attention_budget_bytes);
  // VAE decode of the whole batch: about four full-resolution tensors of the last block's channels, FP32.
  const double vae = 4.0 * a.vae_channels * a.vae_mult0 * (width * static_cast<double>(height)) * batch_size * 4.0;
  return static_cast<uint64_t>(std::max(unet, vae));
}

}  // namespace fp8s
