// Value structs that cross the engine boundary: generation requests, observer events, results.
// No LibTorch types here, so the GUI can include it cheaply.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/png.h"
#include "core/types.h"
#include "pipeline/lora_request.h"

namespace fp8s {

// SDXL size conditioning (0 = the image size; crop 0,0), as sgm's `original_size_as_tuple`,
// `crop_coords_top_left` and `target_size_as_tuple`.
struct SdxlSize {
  int original_width = 0, original_height = 0;
  int crop_top = 0, crop_left = 0;
  int target_width = 0, target_height = 0;
};

// SDXL's unconditional branch: auto = zeroed text conditioning for an empty negative prompt
// (sgm's force_zero_embeddings, as A1111), the encoded negative prompt otherwise.
enum class UncondMode { Auto, Prompt, Zero };

struct GenerationRequest {
  std::string prompt;
  std::string negative;
  int steps = 20;
  float cfg = 7.0f;
  int64_t seed = -1;  // -1: random
  int width = 0;      // 0: the model's native size (512 SD1, 1024 SDXL)
  int height = 0;
  int batch_size = 1;
  int batch_count = 1;
  Sampler sampler = Sampler::DpmPP2M;
  Schedule schedule = Schedule::Karras;
  int clip_skip = 1;
  StorageSpec storage;
  ComputeType compute = ComputeType::BF16;
  std::vector<LoraRequest> loras;  // in addition to <lora:NAME:W> tags in the prompt
  LoraMode lora_mode = LoraMode::Auto;
  SdxlSize size;
  UncondMode uncond = UncondMode::Auto;
};

struct PhaseEvent {
  std::string phase;  // load, encode, sample, decode, done
  double t_ms = 0;
};

struct StepEvent {
  int image_index = 0;  // within the batch count
  int step = 0;         // 1-based
  int steps = 0;
  float sigma = 0;
  double step_ms = 0;    // the whole step
  double denoise_ms = 0; // the UNet call(s) of the step
  RgbImage preview;      // cheap latent -> RGB approximation at latent resolution
};

struct MemorySample {
  std::string phase;
  int step = -1;
  double t_ms = 0;
  uint64_t tracked_live_bytes = 0;
  uint64_t tracked_peak_bytes = 0;
  uint64_t rss_bytes = 0;
  uint64_t rss_peak_bytes = 0;
  uint64_t cuda_allocated_bytes = 0;
  uint64_t cuda_reserved_bytes = 0;
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void onPhase(const PhaseEvent&) {}
  virtual void onStep(const StepEvent&) {}
  virtual void onMemory(const MemorySample&) {}
};

struct TimingReport {
  double load_ms = 0;
  double encode_ms = 0;
  std::vector<double> step_ms;
  std::vector<double> denoise_ms;
  double decode_ms = 0;
  double total_ms = 0;
};

struct GeneratedImage {
  RgbImage image;
  uint64_t seed = 0;
  std::string parameters;  // A1111 infotext
};

struct GenerationResult {
  std::vector<GeneratedImage> images;
  TimingReport timing;
  uint64_t weight_bytes = 0;
  uint64_t unet_bytes = 0, text_bytes = 0, vae_bytes = 0;
  uint64_t tracked_peak_bytes = 0;  // peak live tensor bytes during this request
  uint64_t rss_peak_bytes = 0;
};

struct ModelInfo {
  std::string path;
  std::string architecture;
  std::string storage;
  uint64_t unet_bytes = 0, text_bytes = 0, vae_bytes = 0;
  int native_size = 512;
};

}  // namespace fp8s
