// A loaded Stable Diffusion model: its configuration, the text encoder(s), the UNet and the VAE,
// materialised from the checkpoint in the requested storage type; plus the stages built on them
// (text conditioning, the CFG denoiser, sampling, VAE) that the engine and `probe` share.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/png.h"
#include "io/safetensors.h"
#include "models/architecture.h"
#include "models/nn.h"
#include "models/streaming.h"
#include "models/text_encoder.h"
#include "pipeline/family.h"
#include "pipeline/lora_request.h"
#include "pipeline/sampling_init.h"
#include "sampling/samplers.h"

namespace fp8s {


class TextEncoderImpl;
class UNetImpl;
class PassControl;
struct UNetControl;
class VaeImpl;

struct SamplingParams {
  Sampler sampler = Sampler::Euler;
  Schedule schedule = Schedule::Normal;
  int steps = 20;
  float cfg = 7.0f;
  uint64_t seed = 0;
  SamplingInit init;
};


// The UNet's residency plan under `budget` (models/streaming.h), from the checkpoint's header: the
// plan a load makes (Model::set_weight_budget), without loading.
ResidencyPlan unet_residency_plan(const SafetensorsFile& file, const StorageSpec& storage, uint64_t budget);

class Model {
 public:
  // Opens the checkpoint (kept open: weights can be re-materialised in another storage type) and
  // loads every component onto `device`, tensor by tensor. Throws InputError for a wrong or
  // unsupported architecture.
  Model(const std::string& checkpoint, const StorageSpec& storage, const at::Device& device = at::Device(at::kCPU));
  ~Model();

  const ModelConfig& config() const { return config_; }
  const Detection& detection() const { return detection_; }
  const StorageSpec& storage() const { return storage_; }
  // Where the weights live and the forwards run. The stages below take and return CPU tensors
  // (noise and sampling stay on the CPU, docs/architecture.md, "Text, noise and files"); only the networks run on the device.
  const at::Device& device() const { return device_; }
  // The storage type of the checkpoint's own quantisable weights (unset when mixed).
  const std::optional<StorageSpec>& source_storage() const { return source_; }
  // Non-empty when the checkpoint is already FP8: a sentence saying that other storage types hold
  // its FP8 values (what the log, the Model panel and compare show). Logged once per model.
  std::string source_note() const;
  const SafetensorsFile& file() const { return *file_; }
  WeightBytes weight_bytes() const { return bytes_; }  // measured at load
  // Re-materialises every weight from the file in another storage type (no-op if unchanged).
  void set_storage(const StorageSpec& storage);
  // Non-empty after a reload from the file failed (the file was truncated or became unreadable):
  // the weights are gone and set_storage must succeed before the model is used again.
  const std::string& reload_error() const { return reload_error_; }
  // The UNet's weight budget (models/streaming.h): the bytes its resident weights may take; the
  // input, middle and output blocks beyond it stream from the file (the full-resolution ones
  // first: their compute hides the transfer best). Unset: all resident. A change reloads the UNet.
  // `reload` false: the next set_storage that reloads applies it (one reload for both changes).
  void set_weight_budget(std::optional<uint64_t> budget, bool reload = true);
  const std::optional<uint64_t>& weight_budget() const { return budget_; }
  const ResidencyPlan& residency() const { return streaming_.plan; }
  StreamStats stream_stats() const;
  void reset_stream_stats();
  // After sampling (done or cancelled): no read in flight, nothing staged.
  void end_streaming();

  // SD1 text conditioning for 77-token windows: tokens [B,77] -> hidden [B,77,D] (FP32).
  // clip_skip 1 = last layer, 2 = penultimate (then the final LayerNorm, as A1111).
  at::Tensor encode_tokens(const at::Tensor& tokens, int clip_skip, ComputeType compute,
                           const TokenOverrides& overrides = {}) const;
  // SDXL conditioning: embedder 0 (CLIP-L) and 1 (OpenCLIP bigG) hidden states, their
  // concatenation (the UNet's context) and the pooled embedder-1 output.
  struct SdxlText {
    at::Tensor hidden_l, hidden_g, context, pooled;
  };
  SdxlText encode_sdxl(const at::Tensor& tokens_l, const at::Tensor& tokens_g, ComputeType compute,
                       const TokenOverrides& overrides_l = {}, const TokenOverrides& overrides_g = {}) const;
  // The SDXL vector y = pooled ++ sinusoidal(256) of [orig_h, orig_w, crop_top, crop_left, target_h,
  // target_w] (size_cond [B,6]).
  at::Tensor sdxl_vector(const at::Tensor& pooled, const at::Tensor& size_cond) const;
  bool is_sdxl() const { return config_.unet.adm_in_channels > 0; }

  // One UNet call: eps for x at timesteps t.
  // `control`: a ControlNet's residuals added (scaled already).
  at::Tensor unet(const at::Tensor& x, const at::Tensor& t, const at::Tensor& context,
                  const at::Tensor& y, ComputeType compute,
                  const std::atomic<bool>* cancel = nullptr, const UNetControl* control = nullptr) const;
  at::Tensor vae_decode(const at::Tensor& latent, ComputeType compute) const;
  at::Tensor vae_encode(const at::Tensor& image, ComputeType compute) const;
  // The encoder's posterior for images [B,3,H,W] in [-1,1]: mean and log-variance [B,2·z,h,w], FP32.
  at::Tensor vae_moments(const at::Tensor& image, ComputeType compute) const;
  // Images the VAE has encoded so far (img2img encodes its init image once per batch).
  int64_t vae_encoded_images() const { return vae_encoded_.load(); }
  float latent_scale() const { return config_.vae.scale_factor; }
  // A 9-channel UNet (sd-v1-5-inpainting): its input is the latent ++ mask ++ masked-image latent.
  bool is_inpainting() const { return config_.unet.in_channels == 9; }
  // The whole sampling loop with classifier-free guidance from `noise` (unit normal):
  // k-diffusion samplers start at noise * sigma_max, DDIM at noise itself; with params.init from
  // the init latent noised to the first sigma (timestep) of the truncated schedule.
  at::Tensor sample(const at::Tensor& noise, const at::Tensor& cond, const at::Tensor& uncond,
                    const SamplingParams& params, ComputeType compute,
                    const StepCallback& callback = {},
                    const std::atomic<bool>* cancel = nullptr,
                    const std::function<void(double)>& on_model_ms = {},
                    const at::Tensor& y_cond = {}, const at::Tensor& y_uncond = {},
                    const std::shared_ptr<PassControl>& control = nullptr) const;
  // The CFG denoiser of a pass (sample() runs it through sample_pass): D over the UNet's ε with
  // k-diffusion's CompVisDenoiser, and ε itself at integer timesteps for DDIM. `control`: the
  // pass's ControlNets (families/sd/control.h), told of each step.
  PassDenoiser denoiser(const at::Tensor& cond, const at::Tensor& uncond, float cfg, ComputeType compute,
                        const at::Tensor& y_cond, const at::Tensor& y_uncond, const at::Tensor& image_cond,
                        const std::function<void(double)>& on_model_ms, const std::atomic<bool>* cancel,
                        const std::shared_ptr<PassControl>& control = nullptr) const;
  const DiscreteSchedule& schedule() const { return schedule_; }

  // Makes exactly these LoRAs active (merged into the weights: W += m·(alpha/r)·up·down in FP32,
  // FP8 weights dequantised and quantised again). Layers a previous set touched are first restored
  // from the file, so removing a LoRA restores the base weights exactly. Returns the number of
  // layers changed.
  // `mode` Auto means online when the storage is FP8, merge otherwise. Online LoRAs keep their
  // factors beside the layers and change no weight; changing multipliers never reloads the model.
  std::size_t set_loras(const std::vector<LoraRequest>& loras, LoraMode mode = LoraMode::Auto);
  // FP8 compute for the E4M3 Linear layers (GenerationRequest::fp8_compute); the caller checks the
  // device supports it (backend::supports_fp8_compute).
  void set_fp8_compute(bool on);
  // Every Linear/Conv2d layer, by checkpoint weight key.
  const std::map<std::string, QuantisedLayer*>& layers() const { return layers_; }

 private:
  void load_all();
  void load_unet();
  void reload();
  void index_layers();

  std::unique_ptr<SafetensorsFile> file_;
  ModelConfig config_;
  Detection detection_;
  std::optional<StorageSpec> source_;
  bool source_warned_ = false;
  StorageSpec storage_;
  at::Device device_;
  std::vector<std::shared_ptr<TextEncoderImpl>> text_;
  std::shared_ptr<UNetImpl> unet_;
  std::shared_ptr<VaeImpl> vae_;
  std::string reload_error_;
  WeightBytes bytes_;
  std::map<std::string, QuantisedLayer*> layers_;   // checkpoint weight key -> layer
  std::map<std::string, bool> layer_quantisable_;   // key -> whether its component is FP8-able
  std::vector<LoraRequest> active_loras_;
  LoraMode active_mode_ = LoraMode::Merge;
  std::vector<std::string> lora_touched_;           // keys changed by the active LoRAs
  DiscreteSchedule schedule_;
  mutable std::atomic<int64_t> vae_encoded_{0};
  std::optional<uint64_t> budget_;
  NetworkStreaming streaming_;  // last: destroyed (its reader joined) before the UNet
};

}  // namespace fp8s
