// A LoRA to apply: file and multipliers for the text encoder(s) and the UNet.
#pragma once

#include <string>

namespace fp8s {

struct LoraRequest {
  std::string path;
  double te_multiplier = 1.0;
  double unet_multiplier = 1.0;
  bool operator==(const LoraRequest& o) const {
    return path == o.path && te_multiplier == o.te_multiplier && unet_multiplier == o.unet_multiplier;
  }
};

}  // namespace fp8s
