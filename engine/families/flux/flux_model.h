// A Flux.1 model: its four components (models/flux/flux_files.h) each loaded from its file on first
// use, in the requested storage, and the stages built on them: T5 and CLIP-L conditioning, one
// transformer call, BFL's sampler (Euler on the flow over get_schedule's timesteps), the
// 16-channel autoencoder. Text encoders can be dropped once they have encoded, so a generation's
// peak is its largest phase, not the sum.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"
#include "pipeline/family.h"
#include "lora/lora.h"
#include "families/lora_set.h"
#include "models/streaming.h"
#include "models/checkpoint_layout.h"
#include "models/flux/flux_files.h"
#include "pipeline/lora_request.h"
#include "pipeline/sampling_init.h"

namespace torch::nn {
class Module;
}

namespace fp8s {

class FluxImpl;
class QuantisedLayer;
class T5EncoderImpl;
class TextEncoderImpl;
class VaeImpl;
struct VaeConfig;

// BFL's get_schedule: linspace(1, 0, steps + 1), time-shifted when `shift` (dev) by
// mu = lerp(0.5 at 256 tokens, 1.15 at 4096) of the image token count: exp(mu) / (exp(mu) + 1/t − 1).
std::vector<double> flux_schedule(int steps, int64_t image_tokens, bool shift);
// The same as the sigmas the samplers step over (σ = t, F32).
at::Tensor flux_sigmas(int steps, int64_t image_tokens, bool shift);
// [B, 16, H, W] latent <-> [B, H/2 · W/2, 64] tokens ((c, ph, pw) per token), and their position
// ids [B, N, 3] (0, row, column).
at::Tensor flux_pack(const at::Tensor& latent);
at::Tensor flux_unpack(const at::Tensor& tokens, int64_t height, int64_t width);
at::Tensor flux_image_ids(int64_t batch, int64_t height, int64_t width);

// The guidance of a sampling run: the distilled value dev's transformer is given, and classic CFG
// over the prompt and a negative prompt when cfg != 1 (two transformer calls a step).
struct FluxGuidance {
  float distilled = 3.5f;
  float cfg = 1.0f;
  at::Tensor uncond_txt, uncond_y;
};

// The Flux.1 autoencoder's configuration (BFL names under `prefix`) from the file's shapes, its
// scale and shift from `ae.config` metadata (the tiny reference files) else 0.3611 / 0.1159. Z-Image
// uses the same autoencoder.
VaeConfig flux_ae_config(const SafetensorsFile& file, const std::string& prefix);

struct FluxComponentBytes {
  uint64_t transformer = 0, t5 = 0, clip_l = 0, vae = 0;
};

// The layout of a released Flux-family file, read off the modules themselves built on the meta
// device with the released configuration: "flux-dev", "flux-schnell" (BF16), "t5xxl" (F16),
// "clip-l" (F16), "flux-ae" (F32). `dtype` replaces the float type; F8_E4M3 or F8_E5M2 makes every
// Linear weight FP8 (embeddings, norms and biases BF16 for the transformer, F16 for T5 and CLIP-L;
// the autoencoder cannot be FP8). InputError for another name.
// `depth` / `single_depth` (when > 0) shorten the model for benchmarks: Flux's double and single
// blocks, T5's layers (full width, fewer blocks; the engine reads the depth off the keys).
std::vector<LayoutEntry> flux_family_layout(const std::string& arch, std::optional<Dtype> dtype = std::nullopt,
                                            int depth = 0, int single_depth = 0);
// Every name flux_family_layout knows.
const std::vector<std::string>& flux_family_archs();

// ComfyUI's low-VRAM rule for T5-XXL on a GPU: it stays on the CPU (its output moves to the GPU)
// when the four components and the sampling's working memory do not fit in the device's memory
// together; a CPU model keeps everything on the CPU. `device_bytes` 0: unknown (the GPU).
bool flux_t5_on_cpu(const at::Device& device, const FluxComponentBytes& bytes, uint64_t device_bytes, uint64_t working_bytes);
// T5's compute type for a requested one: FP16 overflows in T5 v1.1's gated feed-forward (HF keeps
// those layers out of FP16), so FP16 becomes BF16 on the CPU and on a GPU of compute capability 8+
// (0: the CPU), FP32 on older GPUs.
at::ScalarType flux_t5_compute(at::ScalarType compute, const at::Device& device, int compute_capability);

// The transformer's residency plan under `budget` (models/streaming.h), from its file's header:
// the plan a load under that budget makes (FluxModel::set_weight_budget), without loading.
ResidencyPlan flux_residency_plan(const ComponentSource& transformer, bool dev, const StorageSpec& storage, uint64_t budget);

class FluxModel {
 public:
  FluxModel(FluxFiles files, const StorageSpec& storage, const at::Device& device);
  ~FluxModel();
  FluxModel(const FluxModel&) = delete;
  FluxModel& operator=(const FluxModel&) = delete;

  const FluxFiles& files() const { return files_; }
  bool dev() const { return files_.dev; }
  const StorageSpec& storage() const { return storage_; }
  const at::Device& device() const { return device_; }
  const FluxComponentBytes& bytes() const { return bytes_; }
  // Where T5 runs (flux_t5_on_cpu); a change drops a loaded T5, which loads there when next used.
  void set_t5_device(const at::Device& device);
  const at::Device& t5_device() const { return t5_device_; }

  // T5 tokens [B, L] -> [B, L, 4096] FP32.
  at::Tensor encode_t5(const at::Tensor& tokens, at::ScalarType compute);
  // CLIP-L tokens [B, 77] -> pooled [B, 768] (the final-LN state at the first EOS) and hidden [B, 77, 768].
  std::pair<at::Tensor, at::Tensor> encode_clip(const at::Tensor& tokens, at::ScalarType compute);
  // Loads every component that has a file now (the first generation would); a missing or
  // unexpected key is an InputError naming it.
  void load_all();
  // Loads the text encoders / the transformer and the autoencoder now, so that a phase's clock
  // starts after its weights are in (a generation's load time is reported apart).
  void load_text_encoders();
  void load_sampling();
  // The weight budget (models/streaming.h): the bytes the transformer's resident weights may take,
  // and T5's in the text phase (the phases take turns under a budget); the blocks beyond it
  // stream. Unset: every block resident. A change drops the loaded transformer and text encoders
  // (they load again under the new plan when next used).
  void set_weight_budget(std::optional<uint64_t> budget);
  const std::optional<uint64_t>& weight_budget() const { return budget_; }
  // The loaded transformer's plan (empty before a load or without a budget), and the streaming of
  // the transformer and T5 since the last reset.
  const ResidencyPlan& residency() const { return streaming_.plan; }
  StreamStats stream_stats() const;
  void reset_stream_stats();
  // After sampling (done or cancelled): no read in flight, nothing staged.
  void end_streaming();
  // Milliseconds spent loading components so far.
  double load_ms() const { return load_ms_; }
  // Frees the text encoders / the transformer (the next use loads them again).
  void release_text_encoders();
  void release_transformer();
  // Another storage: every loaded component is dropped and loads again in it when next used.
  void set_storage(const StorageSpec& storage);
  // FP8 compute for the transformer's Linear layers (GenerationRequest::fp8_compute).
  void set_fp8_compute(bool on);
  // The LoRA set on the transformer (unet multiplier) and CLIP-L (te multiplier), in kohya, BFL or
  // diffusers/PEFT names (lora/flux_lora_keys.h): every file read and checked before a weight
  // changes (a bad one leaves the previous set), the previous set undone (merged layers read again
  // from the file, online terms dropped), and applied to the loaded components now and to each
  // component again whenever it loads later. Returns the layers touched now; 0 for an unchanged set.
  std::size_t set_loras(const std::vector<LoraRequest>& loras, LoraMode mode);
  const std::vector<LoraRequest>& loras() const { return loras_.requests(); }
  at::Tensor transformer(const at::Tensor& img, const at::Tensor& img_ids, const at::Tensor& txt,
                         const at::Tensor& txt_ids, const at::Tensor& t, const at::Tensor& y,
                         const at::Tensor& guidance, at::ScalarType compute);
  // BFL's loop from noise [B, 16, h, w]: Euler over the schedule through sample_pass. `on_step(i, n, t)`
  // after each step (t: the step's starting time).
  // img2img (`init.latent` defined, [B, 16, h, w]): the last t_enc + 1 steps of a schedule of
  // init.schedule_steps (set_img2img_steps), from x = t·noise + (1 − t)·x0 at its first t; with
  // `init.keep` (1 = keep), after each step the kept part is t·noise + (1 − t)·x0 at the step's end t.
  at::Tensor sample(const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& y, int steps,
                    const FluxGuidance& guidance, bool shift, at::ScalarType compute,
                    const std::function<void(int, int, double)>& on_step = {}, const SamplingInit& init = {});
  // The denoiser over the flow (sampling/ steps with it): D(x, σ) = x − σ·v(x, t = σ) on latents
  // [B, 16, h, w], with distilled guidance and CFG when guidance.cfg != 1.
  PassDenoiser denoiser(const at::Tensor& txt, const at::Tensor& y, const FluxGuidance& guidance, at::ScalarType compute,
                        const std::function<void(double)>& on_model_ms = {});
  at::Tensor vae_decode(const at::Tensor& latent, at::ScalarType compute);
  at::Tensor vae_encode(const at::Tensor& image, at::ScalarType compute);
  // The autoencoder's downsampling factor (8 for the released one).
  int vae_factor();

 private:
  FluxImpl& flux();
  T5EncoderImpl& t5();
  TextEncoderImpl& clip();
  VaeImpl& vae();
  // The storage a text encoder or the autoencoder is kept in (component_storage).
  StorageSpec component_storage(const ComponentSource& c) const;
  // How the LoRA set sees the transformer or CLIP-L.
  LoraComponent lora_component(bool clip_component) const;

  FluxFiles files_;
  StorageSpec storage_;
  at::Device device_;
  at::Device t5_device_;
  FluxComponentBytes bytes_;
  bool fp8_compute_ = false;
  double load_ms_ = 0;
  std::shared_ptr<FluxImpl> flux_;
  std::shared_ptr<T5EncoderImpl> t5_;
  std::shared_ptr<TextEncoderImpl> clip_;
  std::shared_ptr<VaeImpl> vae_;
  LoraSet loras_;
  std::optional<uint64_t> budget_;
  // the transformer's and T5's: last, destroyed (their readers joined) before the modules
  NetworkStreaming streaming_, t5_streaming_;
};

}  // namespace fp8s
