// The Stable Diffusion family (SD 1.x and SDXL single-file checkpoints): traits, and the
// operations over pipeline/model (the CLIP text encoders, the ε-prediction UNet on the discrete
// VP schedule, the VAE), A1111's conditioning and infotext.
#include "families/sd/sd_family.h"
#include "families/sd/control.h"
#include "models/controlnet_keys.h"
#include "models/streaming.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "backend/backend.h"
#include "core/error.h"
#include "core/logging.h"
#include "pipeline/family_options.h"
#include "families/weight_budget.h"
#include "memory/process_memory.h"
#include "models/inspect.h"
#include "families/sd/conditioning.h"
#include "families/sd/embeddings.h"
#include "pipeline/engine.h"
#include "families/sd/sd_img2img.h"
#include "pipeline/infotext.h"
#include "families/sd/model.h"
#include "pipeline/sample_pass.h"
#include "text/clip_tokenizer.h"

namespace fp8s {
namespace {

// A1111's "Approx cheap" factors for SD 1.x latents; SDXL's from ComfyUI's latent_formats.SDXL.
const std::vector<float> kSd1Rgb = {0.298f, 0.207f, 0.208f, 0.187f, 0.286f, 0.173f,
                                    -0.158f, 0.189f, 0.264f, -0.184f, -0.271f, -0.473f};
const std::vector<float> kSdxlRgb = {0.3651f, 0.4232f, 0.4341f, -0.2533f, -0.0042f, 0.1068f,
                                     0.1076f, 0.1111f, -0.0362f, -0.3165f, -0.2492f, -0.2188f};
const std::vector<float> kSdxlRgbBias = {0.1084f, -0.0175f, -0.0011f};

FamilyTraits sd_traits(const ModelConfig& c) {
  const bool xl = c.arch == Arch::SDXL_BASE;
  FamilyTraits t;
  t.id = xl ? "sdxl" : "sd1";
  t.name = xl ? "SDXL" : "Stable Diffusion 1.x";
  t.native_size = c.unet.model_channels < 320 ? 64 : xl ? 1024 : 512;  // the tiny test models are small
  t.size_multiple = 8;
  t.min_size = 64;
  t.size_presets = {{512, 512}, {768, 512}, {512, 768}, {768, 768}, {1024, 1024}, {1152, 896}, {896, 1152}, {256, 256}};
  t.samplers = {Sampler::DpmPP2M, Sampler::Euler, Sampler::EulerAncestral, Sampler::Heun, Sampler::Ddim, Sampler::Lcm};
  t.schedules = {{Schedule::Karras, "Karras"}, {Schedule::Normal, "Normal"}};
  t.default_cfg = 7.0f;
  t.clip_skip = true;
  t.controlnet = true;
  t.latent.channels = 4;
  t.latent.factor = 8;
  t.latent.scale = c.vae.scale_factor;
  t.latent.rgb_factors = xl ? kSdxlRgb : kSd1Rgb;
  if (xl) t.latent.rgb_bias = kSdxlRgbBias;
  if (xl) t.options = sdxl_options();
  t.denoiser_label = "UNet";
  t.encode_label = "text encode";
  t.sample_label = "UNet steps";
  t.decode_label = "VAE decode";
  return t;
}

// A vocabulary with more ids than a text encoder's token embedding has rows would index past it at
// the first prompt: refused at load, from the header, naming both numbers.
void check_vocabulary_fits(const ClipTokenizer& tokenizer, const SafetensorsFile& file) {
  for (const auto& tc : config_for(file).text_encoders) {
    const std::string key = tc.prefix + (tc.open_clip_layout ? "token_embedding.weight" : "embeddings.token_embedding.weight");
    const auto* rec = file.find(key);
    const int64_t rows = rec && !rec->shape.empty() ? rec->shape[0] : tc.vocab_size;
    if (static_cast<int64_t>(tokenizer.vocab_size()) > rows) {
      throw InputError(file.path() + ": the tokenizer vocabulary has " + std::to_string(tokenizer.vocab_size()) +
                       " tokens but the " + tc.name + " text encoder's token embedding has " + std::to_string(rows) +
                       " rows; use the vocabulary that belongs to this model (--vocab)");
    }
  }
}

struct SdConditioning : FamilyConditioning {
  Conditioning c;
};

class SdFamily final : public FamilyModel {
 public:
  SdFamily(const LoadOptions& o, const at::Device& device) : embeddings_(o.embeddings_dir) {
    // The vocabulary is looked up before the weights are read (a real checkpoint is GBs): a missing
    // one fails in a moment. A missing checkpoint is left to the loader, whose error names it.
    if (std::filesystem::exists(o.checkpoint)) {
      tokenizer_ = std::make_shared<const ClipTokenizer>(ClipTokenizer::find(o.vocab, o.checkpoint));
      check_vocabulary_fits(*tokenizer_, SafetensorsFile(o.checkpoint));
    }
    model_ = std::make_unique<Model>(o.checkpoint, o.storage, device);
    traits_ = sd_traits(model_->config());
  }

  const FamilyTraits& traits() const override { return traits_; }
  const at::Device& device() const override { return model_->device(); }
  const StorageSpec& storage() const override { return model_->storage(); }

  // the UNet's streaming and the ControlNets'
  StreamStats stream_stats() const override {
    StreamStats s = model_->stream_stats();
    for (const auto& [path, cn] : controlnets_) s += cn.streaming->stats();
    return s;
  }
  void reset_stream_stats() override {
    model_->reset_stream_stats();
    for (auto& [path, cn] : controlnets_) cn.streaming->reset_stats();
  }
  void end_sampling() override {
    model_->end_streaming();
    for (auto& [path, cn] : controlnets_) cn.streaming->end();
  }

  void describe(ModelInfo& i) const override {
    describe_residency(model_->residency(), i);
    i.architecture = model_->detection().description();
    i.storage = weight_type_name(model_->storage().weights);
    i.source_note = model_->source_note();
  }

  WeightBytes weight_bytes(const StorageSpec&) const override {
    auto w = model_->weight_bytes();
    for (const auto& [path, cn] : controlnets_) w.control += cn.bytes;
    return w;
  }

  void check(const GenerationRequest& r, int width, int height) const override {
    const auto& t = model_->config().text_encoders;
    const int layers = t.empty() ? 12 : t.front().layers;
    if (r.clip_skip < 1 || r.clip_skip > layers) {
      throw InputError("clip skip must be between 1 and " + std::to_string(layers) + " (the text encoder's layers)");
    }
    if (r.enable_hr) width = r.hr_target_width(width), height = r.hr_target_height(height);  // the larger pass
    const auto& c = model_->config();
    const uint64_t working = estimate_working_bytes(c.unet, c.vae, width, height, r.batch_size, r.compute);
    // the ControlNets this request loads (from their headers, in the request's storage)
    uint64_t control = 0;
    std::set<std::string> counted;
    for (const auto& u : r.controlnets) {
      const bool loaded = controlnets_.count(u.model) && controlnets_hold(r.storage, r.weight_budget);
      if (loaded || !counted.insert(u.model).second) continue;
      control += predicted_bytes(inspect_model_file(SafetensorsFile(u.model)).total, r.storage);
    }
    // the host's memory, or on a GPU the card's free memory (the weights already hold their part)
    const uint64_t available = device().is_cpu() ? available_memory_bytes() : backend::device_available_bytes(device());
    if (available > 0 && working + control > available) {
      char msg[400];
      std::snprintf(msg, sizeof msg,
                    "%dx%d at batch size %d needs about %.1f GB of working memory (estimate)%s but %.1f GB is "
                    "available; use a smaller size or batch size%s",
                    width, height, r.batch_size, working / 1e9,
                    control ? (" and " + gb_text(control) + " of ControlNet weights").c_str() : "", available / 1e9,
                    control ? ", or fewer ControlNets or FP8 storage" : "");
      throw InputError(msg);
    }
  }

  void prepare(const GenerationRequest& r) override {
    if (r.storage != model_->storage() || r.weight_budget != model_->weight_budget() || !model_->reload_error().empty()) {
      const auto start = std::chrono::steady_clock::now();
      // auto: every block resident (an SD model's weights are small beside its working memory)
      const bool storage_changes = r.storage != model_->storage() || !model_->reload_error().empty();
      model_->set_weight_budget(r.weight_budget, !storage_changes);
      model_->set_storage(r.storage);  // one reload for both
      load_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    model_->set_loras(r.loras, r.lora_mode);
    model_->set_fp8_compute(r.fp8_compute);
    load_controlnets(r);
  }

  std::shared_ptr<FamilyConditioning> encode(const GenerationRequest& r, const std::string& prompt,
                                             const std::string& negative) override {
    std::vector<int> widths;
    for (const auto& te : model_->config().text_encoders) widths.push_back(te.width);
    const auto used = embeddings_.used_by({prompt, negative}, widths);
    auto c = std::make_shared<SdConditioning>();
    c->c = encode_conditioning(*model_, *tokenizer_, prompt, negative, r, r.width, r.height, used);
    ti_hashes_ = ti_hashes_field(used);
    return c;
  }

  void prepare_pass(SamplingInit& init, const ImageJob* job, const GenerationRequest& r, int width, int height,
                    at::Generator& gen) override {
    pass_width_ = width;  // the pass's control hints are made at its size (hires: the hires size)
    pass_height_ = height;
    if (job) {
      auto prep = prepare_init(*model_, *job, r, r.batch_size, gen);  // the posterior drawn after the noise
      init.latent = prep.latent;
      init.keep = prep.keep;
      init.image_cond = prep.image_cond;
    } else if (model_->is_inpainting()) {
      init.image_cond = txt2img_image_cond(*model_, r.batch_size, height, width, r.compute, gen);
    }
  }

  at::Tensor sigmas(const GenerationRequest& r, int steps, int64_t, int64_t) const override {
    return model_->schedule().get_sigmas(r.schedule, steps);
  }

  PassDenoiser denoiser(const FamilyConditioning& cond, const GenerationRequest& r, const SamplingInit& init,
                        const std::function<void(double)>& on_model_ms, const std::atomic<bool>* cancel) override {
    const auto& c = static_cast<const SdConditioning&>(cond).c;
    std::shared_ptr<PassControl> control;
    if (!r.controlnets.empty()) {
      std::vector<ControlUnitRun> units;
      for (const auto& u : r.controlnets) units.push_back(control_unit_run(u, controlnets_.at(u.model).net, pass_width_, pass_height_));
      control = std::make_shared<PassControl>(std::move(units));
    }
    return model_->denoiser(c.cond, c.uncond, r.cfg, r.compute, c.y_cond, c.y_uncond, init.image_cond, on_model_ms, cancel,
                            control);
  }

  at::Tensor encode_images(const at::Tensor& images, ComputeType compute, at::Generator& gen) override {
    return encode_latent(*model_, images, compute, gen);
  }

  at::Tensor decode(const at::Tensor& latent, ComputeType compute) override { return model_->vae_decode(latent, compute); }

  std::string infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                       const std::string& model_hash) const override {
    std::string text = format_infotext(r, seed, model_name, model_hash, r.width, r.height) + controlnet_infotext_fields(r) +
                       options_infotext_fields(traits_.options, r.options);
    if (!ti_hashes_.empty()) text += ", " + ti_hashes_;
    return text;
  }

  std::vector<float> probe(const StorageSpec& storage, ComputeType compute, uint64_t seed, int latent_size,
                           const std::vector<LoraRequest>& loras, LoraMode mode) override {
    auto& model = *model_;
    model.set_storage(storage);
    model.set_loras(loras, mode);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto x = at::randn({1, 4, latent_size, latent_size}, gen, at::kFloat);
    auto ctx = at::randn({1, 77, model.config().unet.context_dim}, gen, at::kFloat);
    if (model.is_inpainting()) {  // a 9-channel UNet: a full mask and an empty masked-image latent
      x = at::cat({x, at::ones({1, 1, latent_size, latent_size}), at::zeros({1, 4, latent_size, latent_size})}, 1);
    }
    auto eps = model.unet(x, at::full({1}, 500.0f), ctx, {}, compute).contiguous();
    return std::vector<float>(eps.data_ptr<float>(), eps.data_ptr<float>() + eps.numel());
  }

  std::shared_ptr<const ClipTokenizer> clip_tokenizer() const override { return tokenizer_; }
  double load_ms() const override { return load_ms_; }

 private:
  // Whether the loaded ControlNets were loaded for this storage and weight budget (else reloaded).
  bool controlnets_hold(const StorageSpec& storage, const std::optional<uint64_t>& budget) const {
    return control_storage_ == storage && control_budget_ == budget;
  }
  // The request's ControlNets loaded in the model's storage (kept while requests name them).
  void load_controlnets(const GenerationRequest& r) {
    if (!controlnets_hold(model_->storage(), model_->weight_budget())) controlnets_.clear();
    control_storage_ = model_->storage();
    control_budget_ = model_->weight_budget();
    // under a weight budget the ControlNets get what the UNet leaves of it, in turn; their blocks
    // beyond that stream
    std::optional<uint64_t> left = control_budget_;
    auto take = [&left](const ResidencyPlan& plan) {
      if (left) left = *left - std::min(*left, plan.fixed_bytes + plan.resident_bytes);
    };
    take(model_->residency());
    std::map<std::string, LoadedControlNet> keep;
    for (const auto& u : r.controlnets) {
      if (keep.count(u.model)) continue;
      const auto it = controlnets_.find(u.model);
      if (it != controlnets_.end()) {
        take(it->second.streaming->plan);
        keep.emplace(u.model, std::move(it->second));
        continue;
      }
      const auto start = std::chrono::steady_clock::now();
      auto cn = load_controlnet(u.model, model_->storage(), model_->device(), &model_->config().unet, &model_->file(), left);
      take(cn.streaming->plan);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      load_ms_ += ms;
      log().info("ControlNet {} ({} layout{}): {:.0f} MB in {}, loaded in {:.1f} s", u.model,
                 cn.contents.diffusers ? "diffusers" : "cldm", cn.contents.prefix.empty() ? "" : ", control_model.",
                 cn.bytes / 1e6, weight_type_name(model_->storage().weights), ms / 1000);
      if (cn.streaming->plan.any()) log().info("ControlNet {}: {}", u.model, cn.streaming->plan.describe());
      keep.emplace(u.model, std::move(cn));
    }
    controlnets_ = std::move(keep);
  }

  EmbeddingLibrary embeddings_;
  std::map<std::string, LoadedControlNet> controlnets_;
  StorageSpec control_storage_;
  std::optional<uint64_t> control_budget_;
  int pass_width_ = 0, pass_height_ = 0;
  std::shared_ptr<const ClipTokenizer> tokenizer_;
  std::unique_ptr<Model> model_;
  FamilyTraits traits_;
  std::string ti_hashes_;
  double load_ms_ = 0;  // storage switches (the first load is the engine's)  // the last encode's textual inversions, for its images' infotext
};

}  // namespace

FamilyEntry sd_family_entry() {
  FamilyEntry e;
  e.id = "sd";
  e.label = "SD 1.x, SDXL base and their inpainting models";
  // The checkpoint family is asked last: its loader names what it finds and cannot run (SD 2,
  // the SDXL refiner, SD3, an unknown layout).
  e.detect = [](const SafetensorsFile&) { return true; };
  e.traits = [](const SafetensorsFile& file) { return sd_traits(config_for(file)); };
  e.open = [](const LoadOptions& o, const at::Device& device) -> std::unique_ptr<FamilyModel> {
    return std::make_unique<SdFamily>(o, device);
  };
  e.tools = sd_tools();
  e.options = sdxl_options();
  e.tools.folder_names.push_back(diffusers_controlnet_names);  // a diffusers ControlNetModel folder
  return e;
}

}  // namespace fp8s
