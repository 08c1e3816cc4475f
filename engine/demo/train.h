// `train-demo`: trains the built-in demo model (issue 10) on rendered scenes: the autoencoder first
// (reconstruction + a small KL term), then the text encoder and UNet together (ε-prediction on the SD
// scaled-linear schedule, 10% caption dropout), then the decoder alone with the encoder frozen (as
// Stability's ft-MSE VAE: sharper images in the same latent space). Deterministic and resumable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <vector>

#include "demo/scenes.h"
#include "models/architecture.h"

namespace fp8s::demo {

// The demo model's SD1 configuration (small widths; the text encoder sized to `vocab_size`).
ModelConfig demo_config(int vocab_size);

struct TrainOptions {
  std::string dir;     // working folder: tokenizer/, state, loss.csv, loss.png, the result
  uint64_t seed = 1;
  int vae_steps = 2000;  // step defaults near the shipped model's recipe (README has it exactly)
  int unet_steps = 8500;
  int unet_cooldown = -1;  // the last N text/UNet steps decay the learning rate linearly towards 0 (-1: a third)
  int decoder_steps = 4000;  // phase 3: the decoder alone, the encoder (the UNet's latent space) frozen
  int vae_batch = 8;
  int unet_batch = 32;
  int decoder_batch = 16;
  double vae_lr = 1e-3;
  double unet_lr = 4e-4;
  double decoder_lr = 5e-4;
  bool vae_bf16 = false;   // autoencoder and decoder phases, and encoding the later phases' latents, in BF16
  bool unet_bf16 = false;  // text/UNet forward and backward in BF16 (FP32 master weights, norms in FP32)
  int checkpoint_every = 250;  // steps between resumable checkpoints
};

struct TrainProgress {
  std::string phase;  // "vae", "unet", "decoder"
  int step = 0, steps = 0;
  double loss = 0;      // mean over the last report interval
  double seconds = 0;   // since this run started
};

// Trains (resuming from `dir`/state when present) and writes `dir`/demo-sd1-fp32.safetensors.
// Returns its path.
std::string train_demo(const TrainOptions& options, const std::function<void(const TrainProgress&)>& progress);

// The autoencoder's ceiling: each scene rendered, encoded (posterior mean) and decoded by the
// checkpoint's VAE in FP32, then scored like a generated image. No sampler can do better than this.
std::vector<Score> score_autoencoder(const std::string& checkpoint, const std::vector<Scene>& scenes,
                                     std::vector<RgbImage>* reconstructions = nullptr);

}  // namespace fp8s::demo
