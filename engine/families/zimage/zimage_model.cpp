// The Z-Image family's model (../shared/reference/zimage/README.md, "generate"): the prompt in
// Qwen's chat template, Qwen3's hidden_states[-2] of its tokens (at most --qwen-max-length), the
// transformer as a denoiser over the flow with CFG on the usual scale (diffusers' normalisation and
// truncation), the shifted schedule, and the Flux.1 autoencoder.
#include "families/zimage/zimage_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <sstream>

#include "core/compute_choice.h"
#include "backend/backend.h"
#include "core/error.h"
#include "core/logging.h"
#include "families/flux/flux_family.h"
#include "pipeline/family_options.h"
#include "families/weight_budget.h"
#include "models/lm/decoder_lm.h"
#include "families/zimage/zimage_files.h"
#include "families/zimage/zimage_lora_keys.h"
#include "families/zimage/zimage_sampling.h"
#include "families/zimage/zimage_transformer.h"
#include "io/image_ops.h"
#include "lora/lora_apply.h"
#include "families/lora_set.h"
#include "memory/process_memory.h"
#include "models/component_load.h"
#include "models/vae.h"
#include "pipeline/engine.h"
#include "pipeline/img2img.h"
#include "pipeline/infotext.h"
#include "pipeline/run_support.h"
#include "text/prompt_parser.h"
#include "text/qwen_tokenizer.h"

namespace fp8s {
namespace {

constexpr uint64_t kZImageProcessBytes = 600ull << 20;
constexpr int kDefaultTextLength = 512;
constexpr double kDefaultShift = 3.0;  // Turbo's, where --shift is 0

std::string component_path(const LoadOptions& o, const char* role) {
  const auto it = o.components.find(role);
  return it == o.components.end() ? std::string() : it->second;
}


struct ZImageConditioning : FamilyConditioning {
  at::Tensor cond, uncond;  // caption features [1, L, D], FP32 on the CPU
};

// The bytes of each part in a storage, from the headers (the text encoder's unused last layer
// counted in: an upper bound).
WeightBytes estimate(const ZImageFiles& f, const StorageSpec& storage) {
  return {component_weight_bytes(f.transformer, storage, true, false), component_weight_bytes(f.text_encoder, storage, true, true),
          component_weight_bytes(f.vae, storage, storage.fp8_vae, true)};
}


class ZImageFamily final : public FamilyModel {
 public:
  ZImageFamily(const LoadOptions& o, const at::Device& device) : files_(zimage_files(o)), storage_(o.storage), device_(device) {
    tokenizer_ = std::make_shared<const QwenTokenizer>(QwenTokenizer::find(component_path(o, "qwen_tokenizer"), o.checkpoint));
    config_ = zimage_config(SafetensorsFile(files_.transformer.path), files_.transformer.prefix);
    {
      const SafetensorsFile te(files_.text_encoder.path);
      text_config_ = decoder_lm_config(te, files_.text_encoder.prefix, {}, "qwen3.config");
      text_type_ = flux_component_storage(te, files_.text_encoder.prefix, {WeightType::BF16}).weights;
      if (text_config_.hidden != config_.cap_dim) {
        throw InputError(files_.text_encoder.path + ": a text encoder " + std::to_string(text_config_.hidden) +
                         " wide, but the transformer reads captions " + std::to_string(config_.cap_dim) +
                         " wide (Z-Image Turbo uses Qwen3-4B: qwen_3_4b.safetensors)");
      }
    }
    {
      const SafetensorsFile v(files_.vae.path);
      vae_type_ = flux_component_storage(v, files_.vae.prefix, {WeightType::BF16}).weights;
      vae_factor_ = 1 << (static_cast<int>(flux_ae_config(v, files_.vae.prefix).ch_mult.size()) - 1);
    }
    traits_ = zimage_traits(config_.dim, vae_factor_);
    if (device.is_cpu()) {
      (void)budget_for(storage_, 512, 512, 1, resolve_compute(ComputeType::Auto, false).type, std::nullopt, available_memory_bytes());
    }
  }
  ~ZImageFamily() override { release_all(); }

  const FamilyTraits& traits() const override { return traits_; }
  const at::Device& device() const override { return device_; }
  const StorageSpec& storage() const override { return storage_; }
  double load_ms() const override { return load_ms_; }

  StreamStats stream_stats() const override {
    auto s = streaming_.stats();
    s += text_streaming_.stats();
    return s;
  }
  void reset_stream_stats() override {
    streaming_.reset_stats();
    text_streaming_.reset_stats();
  }
  void end_sampling() override { streaming_.end(); }

  void describe(ModelInfo& i) const override {
    describe_residency(streaming_.plan, i);
    i.architecture = traits_.name;
    i.storage = weight_type_name(storage_.weights);
    const auto b = weight_bytes(storage_);
    const std::pair<const char*, std::pair<const ComponentSource*, uint64_t>> parts[] = {
        {"transformer", {&files_.transformer, b.denoiser}}, {"Qwen3 text encoder", {&files_.text_encoder, b.text}},
        {"autoencoder", {&files_.vae, b.vae}}};
    for (const auto& [name, part] : parts) {
      i.components.push_back({name, part.first->path, weight_type_name(storage_of(part.first).weights), part.second});
    }
  }

  WeightBytes weight_bytes(const StorageSpec& storage) const override {
    auto w = estimate_cached(storage);
    if (storage == storage_) {  // what is loaded, as measured
      if (held_.denoiser) w.denoiser = held_.denoiser;
      if (held_.text) w.text = held_.text;
      if (held_.vae) w.vae = held_.vae;
    }
    return w;
  }

  void check(const GenerationRequest& r, int w, int h) const override {
    if (r.enable_hr) w = r.hr_target_width(w), h = r.hr_target_height(h);
    (void)budget(r, w, h);
  }

  void prepare(const GenerationRequest& r) override {
    cached_job_ = nullptr;
    const int w = r.enable_hr ? r.hr_target_width(r.width) : r.width;
    const int h = r.enable_hr ? r.hr_target_height(r.height) : r.height;
    const auto b = budget(r, w, h);
    if (r.storage != storage_ || b != budget_) {
      release_all();
      storage_ = r.storage;
      budget_ = b;
    }
    fp8_compute_ = r.fp8_compute;
    set_fp8_compute();
    set_loras(r.loras, r.lora_mode);  // every file read and planned before a weight changes
    const auto bytes = estimate_cached(storage_);
    const uint64_t available = run_memory() ? run_memory() + held_.total() : 0;
    // under a budget, or where they do not fit together, the phases take turns
    together_ = !budget_ && (available == 0 || bytes.total() + working(w, h, r.batch_size, r.compute) + kZImageProcessBytes < available);
    if (!together_) release_transformer();
    (void)text_encoder();
  }

  std::shared_ptr<FamilyConditioning> encode(const GenerationRequest& r, const std::string& prompt,
                                             const std::string& negative) override {
    const at::ScalarType compute = compute_dtype(r.compute, device_);
    const int given = static_cast<int>(option_number(traits_.options, r.options, "qwen-max-length"));
    const int limit = given > 0 ? given : kDefaultTextLength;
    auto c = std::make_shared<ZImageConditioning>();
    c->cond = encode_text(prompt, limit, compute);
    if (r.cfg > 1.0f) c->uncond = encode_text(negative, limit, compute);
    if (!together_) release_text_encoder();
    return c;
  }

  bool sampling_needs_load() const override { return true; }
  void begin_sampling() override {
    (void)transformer();
    (void)vae();
  }

  void prepare_pass(SamplingInit& init, const ImageJob* job, const GenerationRequest& r, int, int,
                    at::Generator& gen) override {
    if (!job) return;
    // the image encoded once for the request (the posterior mean, as for Flux)
    if (cached_job_ != job) {
      cached_latent_ = vae().encode(image_tensor(job->source).to(device_), compute_dtype(r.compute, device_)).to(at::kCPU, at::kFloat);
      cached_job_ = job;
    }
    PreparedInit prep;
    prep.latent = cached_latent_.expand({r.batch_size, -1, -1, -1}).contiguous();
    apply_latent_mask(prep, *job, r, r.batch_size, gen);
    init.latent = prep.latent;
    init.keep = prep.keep;
  }

  at::Tensor sigmas(const GenerationRequest& r, int steps, int64_t, int64_t) const override {
    const double shift = option_number(traits_.options, r.options, "shift");
    const auto s = zimage_sigmas(steps, shift > 0 ? shift : kDefaultShift);
    return at::tensor(s, at::kFloat);
  }

  PassDenoiser denoiser(const FamilyConditioning& cond, const GenerationRequest& r, const SamplingInit&,
                        const std::function<void(double)>& on_model_ms, const std::atomic<bool>*) override {
    const auto& c = static_cast<const ZImageConditioning&>(cond);
    ZImageSampling s;
    s.cfg = r.cfg;
    s.cfg_norm = option_number(traits_.options, r.options, "cfg-norm");
    s.cfg_truncation = option_number(traits_.options, r.options, "cfg-truncation");
    return zimage_denoiser(transformer(), c.cond, c.uncond, s, compute_dtype(r.compute, device_), device_, on_model_ms);
  }

  at::Tensor encode_images(const at::Tensor& images, ComputeType compute, at::Generator&) override {
    return vae().encode(images.to(device_), compute_dtype(compute, device_)).to(at::kCPU, at::kFloat);
  }
  at::Tensor decode(const at::Tensor& latent, ComputeType compute) override {
    return vae().decode(latent.to(device_), compute_dtype(compute, device_));
  }

  std::string infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                       const std::string& model_hash) const override {
    std::ostringstream o;
    o << r.prompt << "\n";
    if (!r.negative.empty() && r.cfg > 1.0f) o << "Negative prompt: " << r.negative << "\n";
    o << "Steps: " << r.steps << ", Sampler: " << sampler_display_name(r.sampler) << ", Schedule type: Simple, CFG scale: " << r.cfg
      << options_infotext_fields(traits_.options, r.options);
    o << seed_model_infotext_fields(seed, r.width, r.height, model_name, model_hash) << fp8_weight_infotext_field(r);
    o << image_infotext_fields(r, r.width, r.height) << lora_infotext_fields(r) << storage_infotext_fields(r);
    return o.str();
  }

  // One transformer call at t = 0.5 on a random latent_size² latent and 32 random caption features.
  std::vector<float> probe(const StorageSpec& storage, ComputeType compute, uint64_t seed, int latent_size,
                           const std::vector<LoraRequest>& loras, LoraMode mode) override {
    if (storage != storage_) {
      release_all();
      storage_ = storage;
      budget_.reset();
    }
    set_loras(loras, mode);
    const int64_t side = std::max<int64_t>(2, latent_size / 2 * 2);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto x = at::randn({1, 16, side, side}, gen, at::kFloat);
    const auto cap = at::randn({1, 32, config_.cap_dim}, gen, at::kFloat);
    auto out = transformer().forward(x.to(device_), at::full({1}, 0.5f), cap.to(device_), {32}, compute_dtype(compute, device_))
                   .to(at::kCPU, at::kFloat)
                   .contiguous();
    return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  }

 private:
  // The LoRA set on the transformer (zimage_lora_keys.h names; unet multiplier): the previous set
  // undone, the new one applied now when the transformer is loaded, else when it loads.
  void set_loras(const std::vector<LoraRequest>& loras, LoraMode mode_in) {
    const LoraMode mode = effective_lora_mode(mode_in, storage_);
    if (loras_.same(loras, mode)) return;
    const auto layers = lora_linear_weights(files_.transformer);
    auto next = LoraSet::read(loras, mode, [&](const LoraFile& file, const std::vector<LoraModuleLayout>& modules) {
      return plan_zimage_lora_layout(modules, file.metadata, layers, file.path);
    });
    if (transformer_) loras_.undo(*transformer_, lora_component());
    loras_ = std::move(next);
    if (transformer_) loras_.apply(*transformer_, lora_component());
  }
  LoraComponent lora_component() const {
    return {"", false, files_.transformer, storage_, streaming_.plan.any(), "the Z-Image transformer"};
  }
  at::Tensor encode_text(const std::string& prompt, int limit, at::ScalarType compute) {
    auto ids = tokenizer_->encode(QwenTokenizer::chat_template(plain_prompt(prompt)));
    if (static_cast<int>(ids.size()) > limit) ids.resize(static_cast<std::size_t>(limit));  // diffusers cuts the tail
    const auto tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).unsqueeze(0);
    return text_encoder().forward(tokens, at::Tensor(), compute).to(at::kCPU, at::kFloat);
  }

  static uint64_t working(int w, int h, int batch, ComputeType compute) { return flux_working_bytes(w, h, batch, compute, 3840); }

  // The storage a part is kept in: the transformer the request's; the text encoder its file's
  // 16-bit type under a 16-bit storage; the autoencoder its file's type unless --fp8-vae.
  StorageSpec storage_of(const ComponentSource* c) const {
    StorageSpec s = storage_;
    if (c == &files_.transformer) return s;
    if (c == &files_.vae && is_fp8(s.weights) && !s.fp8_vae) s.weights = WeightType::BF16;
    if (s.weights == WeightType::FP16 || s.weights == WeightType::BF16) s.weights = c == &files_.vae ? vae_type_ : text_type_;
    return s;
  }

  const WeightBytes& estimate_cached(const StorageSpec& storage) const {
    for (const auto& [s, b] : estimates_) {
      if (s == storage) return b;
    }
    estimates_.emplace_back(storage, estimate(files_, storage));
    return estimates_.back().second;
  }

  // The memory the weights may take beside what this model holds: the host's on the CPU, the card's
  // free memory on a GPU (backend::device_available_bytes); 0 where unknown.
  uint64_t run_memory() const {
    return device_.is_cpu() ? available_memory_bytes() : backend::device_available_bytes(device_);
  }

  // The weight budget of a request sampled at w x h (budget_for over what this model may use).
  std::optional<uint64_t> budget(const GenerationRequest& r, int w, int h) const {
    const uint64_t free_bytes = run_memory();
    if (free_bytes == 0) return r.weight_budget;  // unknown: as asked
    auto b = budget_for(r.storage, w, h, r.batch_size, r.compute, r.weight_budget, free_bytes + held_.total());
    if (b && !r.weight_budget) *b -= *b % (256ull << 20);  // whole 256 MiB steps: no reload for a few pages
    return b;
  }
  std::optional<uint64_t> budget_for(const StorageSpec& storage, int w, int h, int batch, ComputeType compute,
                                     std::optional<uint64_t> requested, uint64_t available) const {
    auto phases = [&](const StorageSpec& st) {
      const auto b = estimate_cached(st);
      PhaseBytes p;
      p.denoiser = b.denoiser;
      p.text = b.text;
      p.vae = b.vae;
      p.working = working(w, h, batch, compute);
      p.process = kZImageProcessBytes;
      const uint64_t per = is_fp8(st.weights) ? 1 : st.weights == WeightType::FP32 ? 4 : 2;
      const uint64_t d = static_cast<uint64_t>(config_.dim);
      const uint64_t block = d * (4 * d + 3 * static_cast<uint64_t>(config_.ffn) + 4 * static_cast<uint64_t>(config_.adaln));
      p.denoiser_staging = 2 * block * per;
      p.text_staging = 2 * (b.text / static_cast<uint64_t>(std::max(1, text_config_.layers)));
      return p;
    };
    const std::string what = storage_label(storage) + " Z-Image at " + std::to_string(w) + "x" + std::to_string(h);
    return choose_weight_budget(phases(storage), available, requested, what, is_fp8(storage.weights), [&] {
      StorageSpec fp8 = storage;
      fp8.weights = WeightType::FP8_E4M3;
      return phases(fp8).peak(std::nullopt);
    });
  }

  ZImageTransformerImpl& transformer() {
    if (!transformer_) {
      auto make = [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<ZImageTransformerImpl>(zimage_config(f, p)); };
      const std::string missing = files_.transformer.path + ": no Z-Image transformer";
      const auto ignorable = ZImageTransformerImpl::ignorable_keys();
      transformer_ = budget_ ? load_streamed(files_.transformer, missing, storage_, ignorable, device_, *budget_, held_.denoiser,
                                             load_ms_, streaming_, make)
                             : load_component(files_.transformer, missing, storage_, true, ignorable, device_, held_.denoiser,
                                              load_ms_, make);
      if (budget_) {
        log().info("Z-Image transformer, {} budget {:.1f} GB: {}", weight_type_name(storage_.weights),
                   static_cast<double>(*budget_) / 1e9, streaming_.plan.describe());
      }
      set_fp8_compute();
      loras_.apply(*transformer_, lora_component());
    }
    return *transformer_;
  }
  DecoderLmImpl& text_encoder() {
    if (!text_) {
      const auto& c = files_.text_encoder;
      const StorageSpec st = storage_of(&c);
      auto make = [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<DecoderLmImpl>(decoder_lm_config(f, p, {}, "qwen3.config")); };
      const auto ignorable = DecoderLmImpl::ignorable_keys(text_config_);
      const std::string missing = files_.transformer.path + ": no Qwen3 text encoder; pass --text-encoder qwen_3_4b.safetensors";
      text_ = budget_ ? load_streamed(c, missing, st, ignorable, device_, *budget_, held_.text, load_ms_, text_streaming_, make)
                      : load_component(c, missing, st, is_fp8(st.weights), ignorable, device_, held_.text, load_ms_, make);
      if (budget_) log().info("Qwen3 text encoder, budget {:.1f} GB: {}", static_cast<double>(*budget_) / 1e9, text_streaming_.plan.describe());
    }
    return *text_;
  }
  VaeImpl& vae() {
    if (!vae_) {
      const auto& c = files_.vae;
      vae_ = load_component(c, files_.transformer.path + ": no Flux autoencoder; pass --vae ae.safetensors", storage_of(&c),
                            storage_.fp8_vae, {}, device_, held_.vae, load_ms_,
                            [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<VaeImpl>(flux_ae_config(f, p)); });
    }
    return *vae_;
  }
  void set_fp8_compute() {
    if (!transformer_) return;
    for (const auto& m : transformer_->modules(false)) {
      if (auto* l = dynamic_cast<QLinearImpl*>(m.get())) l->fp8_compute = fp8_compute_;
    }
  }
  void release_transformer() {
    streaming_.clear();
    transformer_.reset();
    loras_.forget("");
    held_.denoiser = 0;
    trim_heap();
  }
  void release_text_encoder() {
    text_streaming_.clear();
    text_.reset();
    held_.text = 0;
    trim_heap();
  }
  void release_all() {
    release_transformer();
    release_text_encoder();
    vae_.reset();
    held_.vae = 0;
  }

  ZImageFiles files_;
  StorageSpec storage_;
  at::Device device_;
  std::shared_ptr<const QwenTokenizer> tokenizer_;
  ZImageConfig config_;
  DecoderLmConfig text_config_;
  WeightType text_type_ = WeightType::BF16, vae_type_ = WeightType::FP32;
  int vae_factor_ = 8;
  FamilyTraits traits_;
  std::optional<uint64_t> budget_;
  bool fp8_compute_ = false, together_ = true;
  double load_ms_ = 0;
  WeightBytes held_;
  mutable std::vector<std::pair<StorageSpec, WeightBytes>> estimates_;
  LoraSet loras_;
  std::shared_ptr<ZImageTransformerImpl> transformer_;
  std::shared_ptr<DecoderLmImpl> text_;
  std::shared_ptr<VaeImpl> vae_;
  const ImageJob* cached_job_ = nullptr;
  at::Tensor cached_latent_;
  // last, destroyed first: their readers join before the modules go
  NetworkStreaming streaming_, text_streaming_;
};

}  // namespace

FamilyTraits zimage_traits(int dim, int vae_factor) {
  FamilyTraits t;
  t.prediction = Prediction::Flow;
  t.id = "zimage-turbo";
  t.name = "Z-Image Turbo";
  t.native_size = dim < 3840 ? 8 * 2 * vae_factor : 1024;  // the tiny reference transformers are narrow and small
  t.size_multiple = 2 * vae_factor;  // 2x2 patches of the latent
  t.min_size = t.size_multiple;
  t.size_step = t.size_multiple;
  t.size_presets = {{1024, 1024}, {1152, 896}, {896, 1152}, {1216, 832}, {832, 1216}, {1344, 768}, {768, 1344}, {512, 512}};
  t.samplers = {Sampler::Euler, Sampler::Heun, Sampler::DpmPP2M};
  t.schedules = {{Schedule::Normal, "Simple"}};
  t.default_steps = 8;
  t.default_cfg = 1.0f;  // Turbo is distilled: no CFG pass
  t.clip_skip = false;
  t.components = zimage_roles();
  t.options = zimage_options();
  t.latent = flux_latent_format(vae_factor);
  t.compare_modes = "fp16,fp8-e4m3";
  t.fp32_probe = false;  // FP32 storage of a 6 B transformer does not fit beside the run
  t.denoiser_label = "Transformer";
  t.encode_label = "Qwen3 encode";
  t.sample_label = "transformer steps";
  t.decode_label = "autoencoder decode";
  return t;
}

StorageSpec zimage_auto_storage(const SafetensorsFile& file) {
  const auto c = zimage_contents(file);
  return c.transformer ? released_storage(file, *c.transformer + "layers.0.attention.qkv.weight") : StorageSpec{WeightType::BF16};
}

ZImageFiles zimage_files(const LoadOptions& o) {
  return resolve_zimage_files(o.checkpoint, component_path(o, "text_encoder"), component_path(o, "vae"));
}

std::unique_ptr<FamilyModel> open_zimage(const LoadOptions& options, const at::Device& device) {
  return std::make_unique<ZImageFamily>(options, device);
}

WeightBytes zimage_estimate(const LoadOptions& options, const StorageSpec& storage) { return estimate(zimage_files(options), storage); }

}  // namespace fp8s
