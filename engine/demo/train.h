// `train-demo`: trains the built-in demo model (issue 10) on rendered scenes: the autoencoder first
// (reconstruction + a small KL term), then the text encoder and UNet together (ε-prediction on the SD
// scaled-linear schedule, 10% caption dropout). Deterministic from the seed and resumable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "models/architecture.h"

namespace fp8s::demo {

// The demo model's SD1 configuration (small widths; the text encoder sized to `vocab_size`).
ModelConfig demo_config(int vocab_size);

struct TrainOptions {
  std::string dir;     // working folder: tokenizer/, state, loss.csv, loss.png, the result
  uint64_t seed = 1;
  int vae_steps = 2000;
  int unet_steps = 6000;
  int vae_batch = 8;
  int unet_batch = 32;
  double vae_lr = 1e-3;
  double unet_lr = 4e-4;
  int checkpoint_every = 250;  // steps between resumable checkpoints
};

struct TrainProgress {
  std::string phase;  // "vae", "unet"
  int step = 0, steps = 0;
  double loss = 0;      // mean over the last report interval
  double seconds = 0;   // since this run started
};

// Trains (resuming from `dir`/state when present) and writes `dir`/demo-sd1-fp32.safetensors.
// Returns its path.
std::string train_demo(const TrainOptions& options, const std::function<void(const TrainProgress&)>& progress);

}  // namespace fp8s::demo
