// The component set (docs/architecture.md, "The component set"): a family made of a denoiser, a
// text encoder and an autoencoder, each a module loaded from its own file when first used
// (Z-Image, FLUX.2). It owns what those families share: the storage rule of each part, loading
// and release, the weight budget and the phase plan (the parts of a phase resident together; the
// phases taking turns where they do not fit; the denoiser's and the text encoder's blocks streamed
// under a budget), the bytes held and the load time, FP8 compute, the LoRA set on the denoiser, a
// storage switch without a reload, and img2img's latent encoded once a request. A family derives
// from it and writes its traits, its text encoding, schedule, denoiser and autoencoder calls.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "families/lora_set.h"
#include "models/component_files.h"
#include "models/streaming.h"
#include "pipeline/family.h"

namespace torch::nn {
class Module;
}

namespace fp8s {

enum class Part { Denoiser = 0, Text = 1, Vae = 2 };

// A family's LoRA key map for its denoiser: the modules of a file (its metadata) onto the weights
// (key -> shape) of the denoiser's file; InputError naming `label` when they do not fit.
using DenoiserLoraLayout = LoraLayoutPlan (*)(const std::vector<LoraModuleLayout>& modules,
                                              const std::map<std::string, std::string>& metadata,
                                              const std::map<std::string, std::vector<int64_t>>& weights, const std::string& label);

struct PartSpec {
  std::string name;   // what describe calls it: "transformer", "Qwen3 text encoder"
  std::string label;  // what messages and the logs call it: "the Z-Image transformer"
  ComponentSource source;
  std::string missing;                  // the error when it has no file
  std::vector<std::string> ignorable;  // keys of its file the module does not read
  // builds the module (on the device in scope) for the file's names under `prefix`; the denoiser's
  // and the text encoder's are BlockNetworks, whose blocks stream under a budget
  std::function<std::shared_ptr<torch::nn::Module>(const SafetensorsFile& file, const std::string& prefix)> make;
  // the weights (elements) of its largest block: two are staged at once when its blocks stream
  uint64_t block_params = 0;
};

// The storage each part is kept in under a request's `storage`: the denoiser the request's; the
// text encoder under a 16-bit storage its file's 16-bit type (`text_type`), else the request's; the
// autoencoder its file's type (`vae_type`) unless FP8 with --fp8-vae or FP32.
StorageSpec part_storage(Part part, const StorageSpec& storage, WeightType text_type, WeightType vae_type);
// The weight bytes of the three parts in `storage`, from their files' headers.
WeightBytes parts_estimate(const ComponentSource& denoiser, const ComponentSource& text, const ComponentSource& vae,
                           const StorageSpec& storage);
// The denoiser's residency plan in `storage` under `budget`, as a load makes it (every layer
// quantised in FP8 storage, the layers outside the blocks resident), from its file's header: the
// module holds placeholders, so no weight is allocated (inspect --weight-budget).
ResidencyPlan denoiser_plan(const PartSpec& denoiser, const StorageSpec& storage, uint64_t budget);

// The traits the flow-matching transformer families share: flow prediction, Euler/Heun/DPM++ 2M on
// the "Simple" schedule, CFG 1 by default, no CLIP skip, no FP32 probe (FP32 storage of a transformer
// of billions does not fit beside the run), sizes in steps of one token (`token` pixels: 2x2 latent
// pixels), and the phase labels ("Transformer", `encode_label`, "transformer steps", "autoencoder
// decode").
FamilyTraits transformer_traits(std::string id, std::string name, int token, std::string encode_label);

class ComponentSet : public FamilyModel {
 public:
  ~ComponentSet() override;
  ComponentSet(const ComponentSet&) = delete;
  ComponentSet& operator=(const ComponentSet&) = delete;

  const at::Device& device() const override { return device_; }
  const StorageSpec& storage() const override { return storage_; }
  double load_ms() const override { return load_ms_; }
  StreamStats stream_stats() const override;
  void reset_stream_stats() override;
  void end_sampling() override;
  // the traits' name, the storage, the denoiser's residency and each part's file, storage and bytes
  void describe(ModelInfo& info) const override;
  WeightBytes weight_bytes(const StorageSpec& storage) const override;
  // the memory a request needs (the weight budget it would run under)
  void check(const GenerationRequest& r, int width, int height) const override;
  // the storage and budget (a change releases every part), FP8 compute, the LoRA set, the phase
  // plan; the text encoder loaded; then the family's prepare_request
  void prepare(const GenerationRequest& r) override;
  bool sampling_needs_load() const override { return true; }
  void begin_sampling() override;
  // img2img and inpainting: the source image encoded once a request (encode_images), the mask
  void prepare_pass(SamplingInit& init, const ImageJob* job, const GenerationRequest& r, int width, int height,
                    at::Generator& gen) override;

 protected:
  // `parts`: the denoiser, the text encoder and the autoencoder, in that order.
  ComponentSet(std::array<PartSpec, 3> parts, const StorageSpec& storage, const at::Device& device);

  // The family's share.
  // The sampling phase's working memory beyond the weights at width x height.
  virtual uint64_t working_bytes(int width, int height, int batch, ComputeType compute) const = 0;
  // What the process holds besides the weights and the working memory.
  virtual uint64_t process_bytes() const { return 600ull << 20; }
  // After the set is ready for `r` (the references of an edit, ...).
  virtual void prepare_request(const GenerationRequest&) {}
  // Maps a LoRA file onto the denoiser's layers (the unet multiplier); none: the family takes no
  // LoRA (refused by name).
  virtual DenoiserLoraLayout lora_layout() const { return nullptr; }
  // The infotext of a flow family that writes its own (Z-Image, Qwen-Image): the prompt, the negative
  // prompt where CFG ran, Steps, Sampler, "Schedule type: Simple", CFG scale, its declared settings,
  // seed and model, FP8 weights, img2img/hires, LoRAs and the storage.
  std::string flow_infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                            const std::string& model_hash) const;
  // The traits' name when a refusal names the model ("FLUX.2 [klein]").
  std::string model_name() const { return traits().name; }

  // The part's module, loaded on first use (under a budget, its blocks planned and streamed).
  torch::nn::Module& part(Part p);
  template <class M>
  M& part_as(Part p) {
    return static_cast<M&>(part(p));
  }
  const PartSpec& spec(Part p) const { return parts_[static_cast<int>(p)]; }
  StorageSpec storage_of(Part p) const { return part_storage(p, storage_, text_type_, vae_type_); }
  // After a request's prompts are encoded: the text encoder released where the phases take turns.
  void text_done();
  // A probe's storage and LoRAs (Engine::unet_probe): every part released when the storage changes.
  void use_for_probe(const StorageSpec& storage, const std::vector<LoraRequest>& loras, LoraMode mode);
  // At open, on the CPU: the memory a 512² request needs beside what is available (refused with
  // both figures when even every block streamed does not fit).
  void check_at_open() const;
  void release_all();

 private:
  // The request's weight budget, `free_bytes` (run_memory(), 0: unknown) beside what this model holds.
  std::optional<uint64_t> budget(const GenerationRequest& r, int width, int height, uint64_t free_bytes) const;
  std::optional<uint64_t> budget_for(const StorageSpec& storage, int width, int height, int batch, ComputeType compute,
                                     std::optional<uint64_t> requested, uint64_t available) const;
  const WeightBytes& estimate_cached(const StorageSpec& storage) const;
  uint64_t run_memory() const;
  void set_loras(const std::vector<LoraRequest>& loras, LoraMode mode);
  LoraSet::Planner lora_planner() const;  // with a lora_layout
  void require_lora_layout() const;        // InputError naming the model when it has none
  uint64_t held_total() const { return held_[0] + held_[1] + held_[2]; }
  LoraComponent lora_component() const;
  void set_fp8_compute();
  void release(Part p);

  std::array<PartSpec, 3> parts_;
  StorageSpec storage_;
  at::Device device_;
  WeightType text_type_ = WeightType::BF16, vae_type_ = WeightType::FP32;
  std::optional<uint64_t> budget_;
  bool fp8_compute_ = false, together_ = true;
  double load_ms_ = 0;
  std::array<uint64_t, 3> held_{};
  mutable std::vector<std::pair<StorageSpec, WeightBytes>> estimates_;
  LoraSet loras_;
  std::array<std::shared_ptr<torch::nn::Module>, 3> modules_;
  const ImageJob* cached_job_ = nullptr;
  at::Tensor cached_latent_;
  // last, destroyed first: their readers join before the modules go (denoiser, text encoder)
  std::array<NetworkStreaming, 2> streaming_;
};

}  // namespace fp8s
