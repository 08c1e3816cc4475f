// The engine: loads a checkpoint once and serves generation requests, reporting progress to an
// observer and honouring a cancel flag. Front ends (CLI, GUI) only talk to this class.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/kernel_options.h"
#include <map>

#include "pipeline/infotext.h"
#include "pipeline/request.h"

namespace fp8s {

class ClipTokenizer;

struct LoadOptions {
  std::string checkpoint;  // required (front ends resolve the default, the demo model)
  StorageSpec storage;
  std::string vocab;  // explicit CLIP vocabulary (empty: search as docs/architecture.md, "Text, noise and files" says)
  std::string lora_dir;  // where <lora:NAME:W> tags are looked up (NAME.safetensors)
  std::string embeddings_dir;  // textual inversions: NAME.safetensors, used by writing NAME in a prompt
  // A model's other files by component role (FamilyTraits::components: "t5xxl", "clip_l", "vae",
  // and "t5_tokenizer"); a role not given is the model file's own, else found beside it.
  std::map<std::string, std::string> components;
  // The family's load settings (FamilyOption::at_load: Flux's --t5-cpu) by name, as text.
  std::map<std::string, std::string> options;
  std::string device = "auto";  // auto (the first CUDA device, else the CPU), cpu, cuda, cuda:N
  // The kernels this engine's runs may use; unset: FP8S_ATTENTION / FP8S_PACKED_CONV (an unknown
  // value there is an InputError at load).
  std::optional<backend::KernelOptions> kernels;
};

// The devices a model can run on here: "cpu" first, then "cuda:N" for each CUDA device (only on a
// CUDA build with a GPU), each with a description ("CPU", "CUDA 0: NVIDIA H200, 139.8 GiB, ...").
struct DeviceChoice {
  std::string id;
  std::string description;
};
std::vector<DeviceChoice> available_devices();

// The weight bytes a load of `options` would hold in `storage`, before any load: its family's
// estimate from the file headers (the one estimate front ends show). InputError when the file is
// unreadable, a component is not found, or no family takes it.
WeightBytes estimate_weight_bytes(const LoadOptions& options, const StorageSpec& storage);

class Engine {
 public:
  explicit Engine(const LoadOptions& options, Observer* observer = nullptr);
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  // Runs the request; throws InputError for a bad request, Cancelled when `cancel` turns true.
  GenerationResult generate(const GenerationRequest& request, Observer* observer,
                            const std::atomic<bool>& cancel);
  ModelInfo info() const;
  // The model's CLIP tokenizer (looked up before the weights were read), for token counters.
  std::shared_ptr<const ClipTokenizer> tokenizer() const;
  // The denoiser's output (FP32, flattened) for fixed random inputs drawn from `seed`, with weights
  // in `storage`: measures what a storage type changes. SD: the UNet at t = 500 on a latent of
  // `latent_size`²; Flux: the transformer at t = 0.5 on that latent's tokens and 32 text tokens.
  std::vector<float> unet_probe(const StorageSpec& storage, ComputeType compute, uint64_t seed,
                                int latent_size, const std::vector<LoraRequest>& loras = {},
                                LoraMode lora_mode = LoraMode::Auto);
  // Validates a request against the loaded model (sizes, steps, ...) without running it.
  void validate(const GenerationRequest& request) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8s
