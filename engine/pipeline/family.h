// The family interface (docs/architecture.md, "Families"): what the one run loop
// (pipeline/run.h), the engine, compare, the CLI and the GUI know of a model. A family is its
// traits (pipeline/family_traits.h) plus the operations below; the engine holds one FamilyModel,
// chosen once at load by the registry, and never asks which family it is.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/family_traits.h"
#include "models/checkpoint_layout.h"
#include "models/inspect.h"
#include "models/streaming.h"
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

// What the samplers call during one pass.
struct PassDenoiser {
  Denoiser denoise;          // D(x, σ), classifier-free guidance included
  EpsModel eps;              // a discrete-time ε model (DDIM): ε(x, t) at an integer timestep; else empty
  at::Tensor alphas_cumprod; // its ᾱ_t, with `eps`
  // Told after each step (0-based, of the pass's `steps`), as A1111's sampler callback is: where
  // the denoiser's behaviour depends on the step (ControlNet's start/end); else empty.
  std::function<void(int step, int steps)> step_done;
};

// The bytes a model's weights take, by part (denoiser, text encoders, autoencoder).

// What a family writes: the 12 pure methods below (its traits, where it runs and in what storage, the
// bytes it holds, and the steps of a run). The others have defaults that a family overrides where
// it has more to say.
class FamilyModel {
 public:
  virtual ~FamilyModel() = default;

  virtual const FamilyTraits& traits() const = 0;
  Prediction prediction() const { return traits().prediction; }
  virtual const at::Device& device() const = 0;
  virtual const StorageSpec& storage() const = 0;
  // Fills the family's part of ModelInfo: architecture, components, storage, source note (default:
  // the traits' name and the storage).
  virtual void describe(ModelInfo& info) const;
  // The denoiser's streaming since the last reset (all zero when every block is resident).
  virtual StreamStats stream_stats() const { return {}; }
  virtual void reset_stream_stats() {}
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
  // After sampling, done or not (cancel, error): a streaming family stops its reads and drops what
  // it staged (models/streaming.h).
  virtual void end_sampling() {}
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
  // The image's infotext (A1111's fields, the family's own where it has them; default:
  // format_infotext and the declared settings' fields).
  virtual std::string infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                               const std::string& model_hash) const;
  // The CLIP tokenizer of its prompts, for the front ends' token counters (nullptr: none).
  virtual std::shared_ptr<const ClipTokenizer> clip_tokenizer() const { return nullptr; }
  // Milliseconds spent loading weights so far (families that load components when used).
  virtual double load_ms() const { return 0; }
  // The denoiser's output (FP32, flattened) for fixed random inputs from `seed` at a latent of
  // latent_size² in `storage` (Engine::unet_probe; default: InputError, the family has none).
  virtual std::vector<float> probe(const StorageSpec& storage, ComputeType compute, uint64_t seed, int latent_size,
                                   const std::vector<LoraRequest>& loras, LoraMode mode);
};

// One family as the registry knows it. `detect` looks at a file's header only (no weights are
// read); `open` loads the model (its components found, its memory checked) on `device`.
// `probe ROLE` (reference cases, docs/architecture.md): one stage of a family's model replayed on a
// case's tensors. The CLI resolves the options; the family opens what the stage needs.
struct ProbeSetup {
  std::string model;  // the checkpoint or component file
  StorageSpec storage;
  at::Device device = at::kCPU;
  ComputeType compute = ComputeType::FP32;
  std::vector<LoraRequest> loras;
  LoraMode lora_mode = LoraMode::Auto;
  int clip_skip = 1;
  // a sampling role's
  Sampler sampler = Sampler::Euler;
  Schedule schedule = Schedule::Normal;
  int steps = 20;
  float cfg = 7.0f;
  uint64_t seed = 0;
  float strength = 1.0f;  // a sampling role's img2img strength
  std::map<std::string, std::string> options;  // the family's declared settings (FamilyTraits::options)
  // ControlNet roles (SD): the ControlNet of a sampling role, and the control's strength, start, end
  std::string controlnet;
  float control_strength = 1.0f, control_start = 0.0f, control_end = 1.0f;
};
// Reads a case's input tensors by role, each checked to have the given number of dimensions
// (0: any; 1 also takes a tensor of one element per row).
using ProbeInputs = std::function<std::map<std::string, at::Tensor>(const std::map<std::string, int64_t>& dims)>;
struct ProbeStages {
  std::vector<std::string> roles;  // the roles this family answers
  std::function<std::map<std::string, at::Tensor>(const std::string& role, const ProbeSetup& setup,
                                                  const ProbeInputs& inputs)>
      run;  // the role's outputs by name
};

// make-synthetic and make-synthetic-lora (docs/architecture.md, "Synthetic checkpoints"): the
// released layouts a family writes with random weights, and random LoRAs for its files.
struct SyntheticLayoutOptions {
  std::optional<Dtype> dtype;  // unset: the released file's
  int depth = 0, single_depth = 0;  // benchmarks: fewer blocks (0: the released count)
};
struct SyntheticLoraOptions {
  int rank = 8;
  double alpha = 8, strength = 0.2;
  uint64_t seed = 0;
  std::string out;
  bool overwrite = false;
};
struct SyntheticWriters {
  std::vector<std::string> archs;  // make-synthetic --arch names
  std::function<std::vector<LayoutEntry>(const std::string& arch, const SyntheticLayoutOptions& options,
                                         std::map<std::string, std::string>& metadata)>
      layout;
  std::vector<std::string> lora_archs;  // make-synthetic-lora --arch names
  // A LoRA for `model` (a file this family detects) or, with `model` empty, for the layout `arch`.
  std::function<void(const std::string& model, const std::string& arch, const SyntheticLoraOptions& options)> lora;
};

// A family's hooks beyond running a model (each optional).
struct FamilyTools {
  // The weight bytes a load of `options` would hold in `storage`, from the file headers alone (the
  // one estimate before load: the Precision panel's figure, compare's memory check).
  std::function<WeightBytes(const LoadOptions& options, const StorageSpec& storage)> estimate;
  // What `--weights auto` means for a file of this family (optional; unset: FP16).
  std::function<StorageSpec(const SafetensorsFile& file)> auto_storage;
  // The residency plan a load of `options` in `storage` under a weight budget of `budget` bytes
  // would make, from the headers (optional; `inspect --weight-budget` prints it).
  std::function<ResidencyPlan(const LoadOptions& options, const StorageSpec& storage, uint64_t budget)> plan;
  ProbeStages probe;
  SyntheticWriters synthetic;
  // The files a load of `options` would use, by component (name, path; inspect lists them), from
  // the headers (optional).
  std::function<std::vector<ComponentInfo>(const LoadOptions& options)> components;
  // How a model folder's tensors in this family's other layouts (diffusers' names) read as its
  // files' names (io/safetensors.h); registered with the family, asked for every folder opened.
  std::vector<FolderRenamer> folder_names;
  // The file's components by prefix for inspect's report (optional: SD's names otherwise).
  std::function<InspectParts(const SafetensorsFile& file)> inspect_parts;
};

struct FamilyEntry {
  std::string id;  // "sd", "flux", ...
  std::string label;  // what it loads, for users: "SD 1.x, SDXL base", "Flux.1 dev and schnell"
  std::function<bool(const SafetensorsFile& file)> detect;
  // The traits as the header tells them, before a load (front ends' defaults).
  std::function<FamilyTraits(const SafetensorsFile& file)> traits;
  std::function<std::unique_ptr<FamilyModel>(const LoadOptions& options, const at::Device& device)> open;
  FamilyTools tools;  // optional: the CLI's tools and the estimate before load
  // What the family's models declare, together, before a model is chosen: the front ends' flags
  // (--NAME for each option, --FLAG for each component role) and the infotext fields it reads.
  std::vector<FamilyOption> options;
  std::vector<ComponentRole> roles;
};

// The families built in (families/builtin.cpp, a level above: the registry declares what it needs
// and the families define it), in the order they are registered; the registry's first look-up
// takes them.
std::vector<FamilyEntry> builtin_families();
// Adds a family (the built-in ones are registered before the first look-up; a test can add its
// own). A later family with the same id replaces the earlier.
void register_family(FamilyEntry entry);
// The family of a model file: the first registered whose detector accepts it (nullptr: none).
const FamilyEntry* find_family(const SafetensorsFile& file);
const std::vector<FamilyEntry>& registered_families();
// The family that answers a probe role (nullptr: none).
const FamilyEntry* find_probe_family(const std::string& role);
// The family that writes a make-synthetic (lora = false) or make-synthetic-lora (true) --arch.
const FamilyEntry* find_synthetic_family(const std::string& arch, bool lora = false);


// A residency plan's figures in ModelInfo (blocks, streamed, bytes, the plan's line).
void describe_residency(const ResidencyPlan& plan, ModelInfo& info);

// The A1111 latent -> RGB preview of a latent [B,C,h,w] (image 0) in a latent format; empty when
// the format has no preview factors for C channels.
RgbImage latent_preview(const at::Tensor& latent, const LatentFormat& format);

}  // namespace fp8s
