// The family interface (docs/architecture.md, "Families"): what the one run loop
// (pipeline/run.h), the engine, compare, the CLI and the GUI know of a model. A family is its
// traits (families/family_traits.h) plus the operations below; the engine holds one FamilyModel,
// chosen once at load by the registry, and never asks which family it is.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "families/family_traits.h"
#include "pipeline/request.h"
#include "pipeline/sampling_init.h"
#include "sampling/samplers.h"

namespace fp8s {

class ClipTokenizer;
struct ImageJob;
struct LoadOptions;
class SafetensorsFile;

// A family's text conditioning for one request: what its denoiser needs, opaque to the run loop.
struct FamilyConditioning {
  virtual ~FamilyConditioning() = default;
};

// How a family's network output becomes the denoised latent k-diffusion's samplers step with:
// Eps, D(x, σ) = x − σ·ε (σ: the discrete VP model's noise level); Flow, D(x, σ) = x − σ·v with
// σ = t on the straight line x_t = t·noise + (1 − t)·x0 (ComfyUI's CONST model sampling).
enum class Prediction { Eps, Flow };

// What the samplers call during one pass.
struct PassDenoiser {
  Denoiser denoise;          // D(x, σ), classifier-free guidance included
  EpsModel eps;              // a discrete-time ε model (DDIM): ε(x, t) at an integer timestep; else empty
  at::Tensor alphas_cumprod; // its ᾱ_t, with `eps`
};

// The bytes a model's weights take, by part (denoiser, text encoders, autoencoder).
struct WeightBytes {
  uint64_t denoiser = 0, text = 0, vae = 0;
  uint64_t total() const { return denoiser + text + vae; }
};

class FamilyModel {
 public:
  virtual ~FamilyModel() = default;

  virtual const FamilyTraits& traits() const = 0;
  virtual Prediction prediction() const = 0;
  virtual const at::Device& device() const = 0;
  virtual const StorageSpec& storage() const = 0;
  // Fills the family's part of ModelInfo: architecture, components, storage, source note.
  virtual void describe(ModelInfo& info) const = 0;
  // The weight bytes of `storage` (the loaded storage: as measured at load; another: the estimate).
  virtual WeightBytes weight_bytes(const StorageSpec& storage) const = 0;

  // The family's checks of a request sampled at width x height, after the common ones
  // (validate_request): its text encoders' settings, FP8 compute, the memory the request needs.
  virtual void check(const GenerationRequest& r, int width, int height) const = 0;
  // Makes the model ready for `r`: its storage, LoRAs (r.loras, tags resolved), FP8 compute and
  // the plan of its phases. May load weights (the run reports it as load time).
  virtual void prepare(const GenerationRequest& r) = 0;
  // Encodes the prompts (without their <lora:> tags) for r.batch_size images.
  virtual std::shared_ptr<FamilyConditioning> encode(const GenerationRequest& r, const std::string& prompt,
                                                     const std::string& negative) = 0;
  // Between encoding and sampling: the sampling phase's weights in (and the text encoders out
  // where the phases do not fit together); a family that loads then says so (a Load phase).
  virtual bool sampling_needs_load() const { return false; }
  virtual void begin_sampling() {}
  // Completes a pass's start at width x height: with `job`, the init image's latent, mask and
  // anything the denoiser needs of them (drawing from `gen` after the noise); without, what a
  // txt2img or hires pass needs besides its latent (a 9-channel UNet's image conditioning).
  virtual void prepare_pass(SamplingInit& init, const ImageJob* job, const GenerationRequest& r, int width,
                            int height, at::Generator& gen) = 0;
  // The schedule of `steps` steps for a latent of latent_h x latent_w: steps + 1 descending
  // sigmas ending with 0 (F32).
  virtual at::Tensor sigmas(const GenerationRequest& r, int steps, int64_t latent_h, int64_t latent_w) const = 0;
  // The denoiser of a pass; `on_model_ms` gets the time of each network call.
  virtual PassDenoiser denoiser(const FamilyConditioning& c, const GenerationRequest& r, const SamplingInit& init,
                                const std::function<void(double)>& on_model_ms, const std::atomic<bool>* cancel) = 0;
  // RGB images [B,3,H,W] in [-1,1] -> the latent img2img and hires start from (FP32, CPU).
  virtual at::Tensor encode_images(const at::Tensor& images, ComputeType compute, at::Generator& gen) = 0;
  // Latent -> images [B,3,H,W] in [-1,1].
  virtual at::Tensor decode(const at::Tensor& latent, ComputeType compute) = 0;
  // The image's infotext (A1111's fields, the family's own where it has them).
  virtual std::string infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                               const std::string& model_hash) const = 0;
  // The CLIP tokenizer of its prompts, for the front ends' token counters (nullptr: none).
  virtual std::shared_ptr<const ClipTokenizer> clip_tokenizer() const { return nullptr; }
  // Milliseconds spent loading weights so far (families that load components when used).
  virtual double load_ms() const { return 0; }
  // The denoiser's output (FP32, flattened) for fixed random inputs from `seed` at a latent of
  // latent_size² in `storage` (Engine::unet_probe).
  virtual std::vector<float> probe(const StorageSpec& storage, ComputeType compute, uint64_t seed, int latent_size,
                                   const std::vector<LoraRequest>& loras, LoraMode mode) = 0;
};

// One family as the registry knows it. `detect` looks at a file's header only (no weights are
// read); `open` loads the model (its components found, its memory checked) on `device`.
struct FamilyEntry {
  std::string id;  // "sd", "flux", ...
  std::function<bool(const SafetensorsFile& file)> detect;
  // The traits as the header tells them, before a load (front ends' defaults).
  std::function<FamilyTraits(const SafetensorsFile& file)> traits;
  std::function<std::unique_ptr<FamilyModel>(const LoadOptions& options, const at::Device& device)> open;
};

// Adds a family (the built-in ones are registered before the first look-up; a test can add its
// own). A later family with the same id replaces the earlier.
void register_family(FamilyEntry entry);
// The family of a model file: the first registered whose detector accepts it (nullptr: none).
const FamilyEntry* find_family(const SafetensorsFile& file);
const std::vector<FamilyEntry>& registered_families();


// The A1111 latent -> RGB preview of a latent [B,C,h,w] (image 0) in a latent format; empty when
// the format has no preview factors for C channels.
RgbImage latent_preview(const at::Tensor& latent, const LatentFormat& format);

}  // namespace fp8s
