// Value structs that cross the engine boundary: generation requests, observer events, results.
// No LibTorch types here, so the GUI can include it cheaply.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/png.h"
#include "core/types.h"
#include "pipeline/family_traits.h"
#include "models/config.h"
#include "pipeline/lora_request.h"

namespace fp8s {

// The random seed: -1 (any negative) becomes a random 32-bit value, as A1111 draws it. Called once
// per request (the engine, compare); the result carries the seed used.
int64_t resolve_seed(int64_t seed);

// One ControlNet unit (A1111's sd-webui-controlnet; issue 43): the ControlNet file, the control
// image resized to the pass's size by `resize` and preprocessed, its residuals × strength on the
// steps whose progress (A1111's, one step late) lies in [start, end].
struct ControlUnit {
  std::string model;
  std::optional<RgbImage> image;
  std::string image_name;  // where the image came from (the infotext names it)
  ControlPreprocessor preprocessor = ControlPreprocessor::None;
  int canny_low = 100, canny_high = 200;  // A1111's defaults
  float strength = 1.0f, start = 0.0f, end = 1.0f;
  ResizeMode resize = ResizeMode::Crop;  // A1111's default, "Crop and Resize"
  ControlMode mode = ControlMode::Balanced;
  bool guess_mode = false;  // cldm's: the uncond half uncontrolled and the residuals scaled
};

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
  // The memory the denoiser's resident weights may take (docs/architecture.md, "Weight budget and
  // streaming"); the blocks beyond it stream from the file. Unset: auto (all resident when the
  // model fits, else what fits beside the working memory). 0: every block streams.
  std::optional<uint64_t> weight_budget;
  ComputeType compute = ComputeType::Auto;  // from the processor (core/compute_choice.h)
  std::vector<LoraRequest> loras;  // in addition to <lora:NAME:W> tags in the prompt
  LoraMode lora_mode = LoraMode::Auto;
  std::vector<ControlUnit> controlnets;  // at most 3 (families whose traits say controlnet)
  // FP8 compute (ComfyUI's fp8_e4m3fn_fast): E4M3-stored Linear layers multiply in FP8 through
  // _scaled_mm with a per-tensor activation scale. CUDA compute capability 8.9+ only; changes numerics.
  bool fp8_compute = false;
  // The family's own settings (FamilyTraits::options: Flux's distilled guidance, Z-Image's shift,
  // SDXL's size conditioning, ...) by name, as text; absent: the declared default. The family
  // reads them (pipeline/family_options.h); run_request refuses one the model does not declare.
  std::map<std::string, std::string> options;

  // img2img (A1111's StableDiffusionProcessingImg2Img): the init image is resized to the request's
  // size (0: the image's own, rounded down to a multiple of 8), encoded, noised to the first sigma
  // of the truncated schedule and sampled from there.
  std::optional<RgbImage> init_image;
  float denoising_strength = 0.75f;  // 0..1; also the hires pass's (hr_denoising_strength)
  ResizeMode resize_mode = ResizeMode::JustResize;
  // Inpainting (with init_image): mask luminance 255 = repaint.
  std::optional<RgbImage> mask;
  int mask_blur = 4;
  InpaintFill inpainting_fill = InpaintFill::Original;
  bool inpaint_full_res = false;  // A1111 "Only masked": the masked region (+ padding) at full size
  int inpaint_full_res_padding = 32;
  bool invert_mask = false;
  // Hires fix (txt2img): a first pass at width x height, upscaled by hr_scale (or to hr_width x
  // hr_height), then an img2img pass of hr_steps (0: steps) at hr_denoising_strength.
  bool enable_hr = false;
  float hr_scale = 2.0f;
  int hr_width = 0, hr_height = 0;
  HrUpscaler hr_upscaler = HrUpscaler::Latent;
  int hr_steps = 0;
  float hr_denoising_strength = 0.7f;
  // The hires pass's size for a first pass of `width` x `height` (hr_width/hr_height or the scale,
  // rounded down to multiples of 8 as A1111 does).
  int hr_target_width(int width) const;
  int hr_target_height(int height) const;
};

// Where a request is: one vocabulary for phase events and memory samples.
enum class Phase { Load, Encode, Sample, Decode, Done };

struct PhaseEvent {
  Phase phase = Phase::Load;
  double t_ms = 0;
};

struct StepEvent {
  int image_index = 0;  // within the batch count
  int step = 0;         // 1-based
  int steps = 0;
  float sigma = 0;       // the noise level the step started from (k-diffusion's callback `sigma`)
  double step_ms = 0;    // the whole step
  double denoise_ms = 0; // the UNet call(s) of the step
  double transfer_wait_ms = 0;  // of those, the time waiting for streamed blocks (the weight budget)
  RgbImage preview;      // cheap latent -> RGB approximation at latent resolution
};

struct MemorySample {
  Phase phase = Phase::Load;
  int step = -1;  // 1-based during sampling, -1 otherwise
  double t_ms = 0;
  uint64_t tracked_live_bytes = 0;
  uint64_t tracked_peak_bytes = 0;
  uint64_t rss_bytes = 0;
  uint64_t rss_peak_bytes = 0;
  bool gpu = false;  // the model runs on a CUDA device: the cuda_* fields below are its memory
  // The CUDA caching allocator on a GPU (zero on the CPU): current, and peak since the phase began.
  uint64_t cuda_allocated_bytes = 0;
  uint64_t cuda_reserved_bytes = 0;
  uint64_t cuda_allocated_peak_bytes = 0;
  uint64_t cuda_reserved_peak_bytes = 0;
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void onPhase(const PhaseEvent&) {}
  virtual void onStep(const StepEvent&) {}
  virtual void onMemory(const MemorySample&) {}
  // A warning for the user before long work (a size far above the model's own); the CLI logs it.
  virtual void onNotice(const std::string&) {}
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
  uint64_t seed = 0;  // the request's resolved seed (image n of the batch count uses seed + n)
  TimingReport timing;
  uint64_t weight_bytes = 0;
  uint64_t unet_bytes = 0, text_bytes = 0, vae_bytes = 0;
  uint64_t control_bytes = 0;  // the request's ControlNets (in weight_bytes too)
  // Streaming (the weight budget): the weights read from the file during this request, the
  // reader's time, and the time the compute waited for a block (transfer wait)
  uint64_t streamed_bytes = 0;
  double stream_read_ms = 0, transfer_wait_ms = 0;
  uint64_t tracked_peak_bytes = 0;  // peak live tensor bytes during this request
  uint64_t rss_peak_bytes = 0;
  bool rss_peak_is_per_request = false;  // the kernel let the high-water mark be reset at the start
  uint64_t vram_peak_bytes = 0;           // CUDA allocator: peak allocated bytes during this request
  uint64_t vram_reserved_peak_bytes = 0;  // and peak reserved (the caching allocator's pool)
  // and the device's used memory at its highest sample (cudaMemGetInfo: the CUDA context, every
  // stream's pool and other processes too; what nvidia-smi shows)
  uint64_t vram_used_peak_bytes = 0;
  // What ran (backend::kernel_usage): the attention kernel(s) and the convolution weight layout(s)
  std::string attention_kernel;
  std::string conv_layout;
};

// One component of a model as loaded: its name ("transformer", "T5-XXL", ...), its file, its
// storage and the bytes it takes in that storage.
struct ComponentInfo {
  std::string name, path, storage;
  uint64_t bytes = 0;
};

struct ModelInfo {
  std::string path;
  // The denoiser's residency plan (docs/architecture.md, "Weight budget and streaming"): its
  // blocks, how many stream, the bytes of the resident and of the streamed ones, and the plan's
  // line ("resident 31 of 57 blocks, 9.8 GB; streaming 26 blocks, 13.9 GB a step"; empty: all resident).
  int blocks = 0, streamed_blocks = 0;
  uint64_t resident_block_bytes = 0, streamed_block_bytes = 0;
  uint64_t fixed_bytes = 0;  // the denoiser's layers outside its blocks (resident; part of the budget)
  std::string residency;
  struct Block {
    std::string name;  // "input_blocks.4", "double_blocks.0"
    uint64_t bytes = 0;
    double compute_per_byte = 1.0;  // relative: the plan streams the highest first (ties: the later)
    bool streamed = false;
  };
  std::vector<Block> block_plan;
  FamilyTraits traits;  // the family's sizes, samplers, guidance, components, latent format
  std::vector<ComponentInfo> components;  // a model of several files: each file's part
  std::string architecture;
  std::string storage;
  std::string source_note;     // set when the checkpoint is already FP8: its values are FP8's in every storage
  uint64_t unet_bytes = 0, text_bytes = 0, vae_bytes = 0;  // the denoiser's, the text encoders', the autoencoder's
  uint64_t control_bytes = 0;  // the ControlNets loaded for the last request
  std::string device = "CPU";      // "CPU" or "CUDA 0: <name>, <GiB>, compute capability X.Y"
  bool gpu = false;                // the model runs on a CUDA device (charts say VRAM)
  uint64_t device_total_bytes = 0;  // the GPU's memory (0 on the CPU)
  std::string kernels;              // the engine's kernel options ("attention auto, packed convolutions on")
};

// The diffusion models' number of training timesteps: no sampling schedule may be longer.
inline constexpr int kTrainingTimesteps = 1000;
// A1111's hires pass (and img2img with fixed steps): `steps` steps of a schedule of
// floor(steps / min(strength, 0.999)) steps; `steps` itself at strength 0. Unclamped: callers
// refuse what exceeds kTrainingTimesteps (validate_request).
double hires_schedule_length(int steps, float strength);

// Checks a request's numbers (size min_size..4096 in multiples of `multiple` — 0 means
// `native_size` —, steps, CFG, batch, SDXL size conditioning, LoRA multipliers of the list and of
// the prompt's <lora:NAME:W> tags); throws InputError naming the value and the allowed range.
// The run (pipeline/run.h) calls it with the family's sizes before it allocates anything.
void validate_request(const GenerationRequest& request, int native_size, int multiple = 8, int min_size = 64);
// InputError naming the unit for more than 3 units, a missing model or image, or a value out of range.
void validate_controlnets(const std::vector<ControlUnit>& units);
// The image size a request runs at: its width/height, else the init image's (rounded down to a
// multiple of `multiple`), else the model's native size.
int request_width(const GenerationRequest& request, int native_size, int multiple = 8, int min_size = 64);
int request_height(const GenerationRequest& request, int native_size, int multiple = 8, int min_size = 64);
// The LoRA part of validate_request (also for `probe`, which applies LoRAs without a request).
void validate_loras(const std::vector<LoraRequest>& loras);
// The prompt's <lora:NAME:W> tags: well formed, multipliers from -100 to 100 (InputError otherwise).
void validate_lora_tags(const std::string& prompt);
// The init image, mask and hires settings of a request sampled at `width` x `height` (SD's and
// Flux's validation share it); the hires size must be a multiple of `multiple` in min_size..4096.
void validate_image_inputs(const GenerationRequest& r, int width, int height, int multiple = 8, int min_size = 64);

// An estimate of the memory one sampling run needs beyond the weights, at the larger of its two
// phases (UNet sampling with CFG, VAE decode of the batch), for a model's UNet and VAE
// configuration and the attention slice budget. Used to refuse absurd sizes up front.
uint64_t estimate_working_bytes(const UNetConfig& unet, const VaeConfig& vae, int width, int height,
                                int batch_size, ComputeType compute, int64_t attention_budget_bytes = 256ll << 20);

}  // namespace fp8s
