// The Flux.1 family (dev and schnell): traits, the components and their memory, the prompt encoded
// by T5-XXL and CLIP-L (emphasis markup removed: Flux was trained on plain captions), the text
// encoders dropped when the transformer's phase would not fit beside them, the transformer as a
// denoiser over the flow (pipeline/flux_model), the 16-channel autoencoder, Forge's infotext.
#include "families/flux/flux_family.h"

#include "families/component_set.h"
#include "pipeline/family_options.h"
#include "models/flux/flux_files.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <map>
#include <cstdio>
#include <optional>
#include <tuple>
#include <sstream>

#include "backend/backend.h"
#include "backend/kernel_options.h"
#include "core/compute_choice.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/strings.h"
#include "io/image_ops.h"
#include "lora/lora_library.h"
#include "memory/process_memory.h"
#include "memory/tracking_allocator.h"
#include "pipeline/img2img.h"
#include "pipeline/infotext.h"
#include "pipeline/engine.h"
#include "families/sd/model.h"
#include "pipeline/run_support.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"
#include "text/t5_tokenizer.h"

namespace fp8s {
namespace {


// CLIP-L's 77 ids as BFL's HFEmbedder gets them: BOS, the prompt (truncated), EOS, EOS padding.
std::vector<int64_t> clip_ids(const ClipTokenizer& tok, const std::string& text) {
  std::vector<int64_t> ids{tok.bos()};
  for (int32_t id : tok.encode(text)) {
    if (ids.size() == 76) break;
    ids.push_back(id);
  }
  ids.resize(77, tok.eos());
  return ids;
}

struct Encoded {
  at::Tensor txt, y;
};

Encoded encode(FluxModel& model, const ClipTokenizer& clip, const T5Tokenizer& t5, const std::string& prompt,
               int t5_length, int batch, at::ScalarType compute) {
  const std::string text = plain_prompt(prompt);
  const auto t5_ids = t5.encode_padded(text, t5_length);
  const auto tokens = at::tensor(std::vector<int64_t>(t5_ids.begin(), t5_ids.end()), at::kLong).unsqueeze(0);
  const auto cl = clip_ids(clip, text);
  const auto ctokens = at::tensor(cl, at::kLong).unsqueeze(0);
  Encoded e;
  e.txt = model.encode_t5(tokens, compute).expand({batch, -1, -1}).contiguous();
  e.y = model.encode_clip(ctokens, compute).first.expand({batch, -1}).contiguous();
  return e;
}

}  // namespace

std::vector<FamilyOption> flux_options(bool dev) {
  // schnell takes the same settings and ignores dev's two (BFL's schnell has no guidance input and
  // never shifts): its Prompt panel and infotext leave them out
  using T = FamilyOption::Type;
  return {{"guidance", "Guidance", dev ? "Distilled CFG Scale" : "", T::Number, 0, 100, "3.5", {},
           "Flux dev: the distilled guidance the transformer is given (Forge's Distilled CFG Scale); no second pass as CFG needs",
           dev, false, dev, {}},
          {"no-shift", "No shift", dev ? "Shift" : "", T::Flag, 0, 1, "0", {"on", "off"},
           "Flux dev: the schedule without the resolution shift (as schnell)", false, false, false, {}},
          {"t5-max-length", "T5 length", "T5 length", T::Integer, 0, 4096, "0", {},
           "Flux: T5's padded length (0: 512 dev, 256 schnell)", false, false, false, {}}};
}

std::vector<FamilyOption> flux_load_options() {
  return {{"t5-cpu", "T5 on the CPU", "", FamilyOption::Type::Flag, 0, 1, "0", {},
           "on a GPU: keep Flux's T5-XXL on the CPU (default: only when the components do not fit in VRAM together)",
           false, true, false, {}}};
}

std::vector<ComponentRole> flux_roles() {
  return {{"t5xxl", "T5-XXL", {"t5xxl"}, "t5", "t5xxl_fp16 / _fp8_e4m3fn[_scaled].safetensors"},
          {"clip_l", "CLIP-L", {"clip_l"}, "clip-l", "clip_l.safetensors"},
          {"vae", "autoencoder", {"ae", "flux_vae", "flux-vae"}, "vae", "ae.safetensors"},
          {"t5_tokenizer", "T5 tokenizer", {"tokenizer"}, "t5-tokenizer", "T5's tokenizer.json or its folder", true}};
}

int flux_t5_length(const GenerationRequest& r, bool dev) {
  const int given = static_cast<int>(option_number(flux_options(dev), r.options, "t5-max-length"));
  return given > 0 ? given : dev ? 512 : 256;
}

std::string format_flux_infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                                 const std::string& model_hash, bool dev) {
  std::ostringstream o;
  o << r.prompt << "\n";
  if (!r.negative.empty() && r.cfg != 1.0f) o << "Negative prompt: " << r.negative << "\n";
  o << "Steps: " << r.steps << ", Sampler: " << sampler_display_name(r.sampler) << ", Schedule type: Simple, CFG scale: " << r.cfg;
  o << options_infotext_fields(flux_options(dev), r.options);
  o << seed_model_infotext_fields(seed, r.width, r.height, model_name, model_hash) << fp8_weight_infotext_field(r);
  o << image_infotext_fields(r, r.width, r.height);
  o << lora_infotext_fields(r) << storage_infotext_fields(r);
  return o.str();
}

namespace {

// ComfyUI's latent_formats.Flux preview factors (16 channels x RGB) and bias.
const std::vector<float> kFluxRgb = {
    -0.0346f, 0.0244f,  0.0681f,  0.0034f,  0.0210f,  0.0687f,  0.0275f,  -0.0668f, -0.0433f, -0.0174f, 0.0160f,  0.0617f,
    0.0859f,  0.0721f,  0.0329f,  0.0004f,  0.0383f,  0.0115f,  0.0405f,  0.0861f,  0.0915f,  -0.0236f, -0.0185f, -0.0259f,
    -0.0245f, 0.0250f,  0.1180f,  0.1008f,  0.0755f,  -0.0421f, -0.0515f, 0.0201f,  0.0011f,  0.0428f,  -0.0012f, -0.0036f,
    0.0817f,  0.0765f,  0.0749f,  -0.1264f, -0.0522f, -0.1103f, -0.0280f, -0.0881f, -0.0499f, -0.1262f, -0.0982f, -0.0778f};
const std::vector<float> kFluxRgbBias = {-0.0329f, -0.0718f, -0.0851f};

}  // namespace

LatentFormat flux_latent_format(int vae_factor) {
  LatentFormat f;
  f.channels = 16;
  f.factor = vae_factor;
  f.scale = 0.3611f;
  f.shift = 0.1159f;
  f.rgb_factors = kFluxRgb;
  f.rgb_bias = kFluxRgbBias;
  return f;
}

namespace {

// What the headers say, read once at load.
struct FluxShapes {
  int hidden = 3072, context = 4096, vec = 768, vae_factor = 8;
};

FluxShapes read_shapes(const FluxFiles& files) {
  FluxShapes s;
  const SafetensorsFile t(files.transformer.path);
  const auto& p = files.transformer.prefix;
  s.hidden = static_cast<int>(t.at(p + "img_in.weight").shape.at(0));
  s.context = static_cast<int>(t.at(p + "txt_in.weight").shape.at(1));
  s.vec = static_cast<int>(t.at(p + "vector_in.in_layer.weight").shape.at(1));
  if (files.vae.found()) {
    const SafetensorsFile v(files.vae.path);
    int levels = 0;
    while (v.find(files.vae.prefix + "encoder.down." + std::to_string(levels) + ".block.0.conv1.weight")) ++levels;
    if (levels > 0) s.vae_factor = 1 << (levels - 1);
  }
  return s;
}

FamilyTraits flux_traits(bool dev, const FluxShapes& shapes) {
  // one token: 2x2 patches of the 8x latent
  FamilyTraits t = transformer_traits(dev ? "flux-dev" : "flux-schnell", dev ? "Flux.1 dev" : "Flux.1 schnell", 16,
                                      "T5 + CLIP-L encode");
  t.native_size = shapes.hidden < 3072 ? 64 : 1024;  // the tiny reference transformers are narrow and small
  t.size_presets = {{1024, 1024}, {1216, 832}, {832, 1216}, {1152, 896}, {896, 1152}, {768, 768}, {512, 512}};
  t.default_steps = dev ? 20 : 4;
  t.cfg_control = !dev;  // dev's distilled guidance takes CFG's place
  t.components = flux_roles();
  t.options = flux_options(dev);
  t.latent = flux_latent_format(shapes.vae_factor);
  t.compare_modes = "fp16,fp8-e4m3,fp8-e5m2";  // E4M3 against E5M2, and FP16 where it fits
  return t;
}

struct FluxConditioning : FamilyConditioning {
  Encoded cond, uncond;
  bool cfg = false;
};

class FluxFamily final : public FamilyModel {
 public:
  FluxFamily(const LoadOptions& o, const at::Device& device)
      : lora_dir_(o.lora_dir), t5_on_cpu_(option_flag(flux_load_options(), o.options, "t5-cpu")) {
    // the components found and the memory checked before any weight is read
    auto files = resolve_flux_files(o.checkpoint, component_file(o, "t5xxl"), component_file(o, "clip_l"), component_file(o, "vae"));
    clip_ = std::make_shared<const ClipTokenizer>(ClipTokenizer::find(o.vocab, o.checkpoint));
    t5_ = std::make_shared<const T5Tokenizer>(T5Tokenizer::find(component_file(o, "t5_tokenizer"), o.checkpoint));
    shapes_ = read_shapes(files);
    traits_ = flux_traits(files.dev, shapes_);
    estimate_bytes(files, o.storage);
    if (device.is_cpu()) check_fits(files, o.storage, 512, 512, 1, resolve_compute(ComputeType::Auto, false).type, available_memory_bytes());
    model_ = std::make_unique<FluxModel>(std::move(files), o.storage, device);
    // each component's own 16-bit type (what a 16-bit storage keeps it in), read once
    for (const auto* c : {&model_->files().t5, &model_->files().clip_l, &model_->files().vae}) {
      if (c->found()) file_type_[c] = fp8s::component_storage(SafetensorsFile(c->path), c->prefix, StorageSpec{WeightType::BF16}).weights;
    }
  }

  const FamilyTraits& traits() const override { return traits_; }
  const at::Device& device() const override { return model_->device(); }
  const StorageSpec& storage() const override { return model_->storage(); }
  std::shared_ptr<const ClipTokenizer> clip_tokenizer() const override { return clip_; }
  double load_ms() const override { return model_->load_ms(); }

  StreamStats stream_stats() const override { return model_->stream_stats(); }
  void reset_stream_stats() override { model_->reset_stream_stats(); }

  void end_sampling() override { model_->end_streaming(); }

  void describe(ModelInfo& i) const override {
    const auto& f = *model_;
    describe_residency(f.residency(), i);
    i.architecture = traits_.name;
    i.storage = weight_type_name(f.storage().weights);
    const auto b = estimate_bytes(f.files(), f.storage());
    const auto& files = f.files();
    const std::pair<const char*, std::pair<const ComponentSource*, uint64_t>> parts[] = {
        {"transformer", {&files.transformer, b.transformer}}, {"T5-XXL", {&files.t5, b.t5}},
        {"CLIP-L", {&files.clip_l, b.clip_l}}, {"autoencoder", {&files.vae, b.vae}}};
    for (const auto& [name, part] : parts) {
      const auto& [source, bytes] = part;
      ComponentInfo c{name, source->path, "not found", bytes};
      if (source->found()) c.storage = weight_type_name(component_storage(source, f.storage()).weights);
      i.components.push_back(std::move(c));
    }
  }

  WeightBytes weight_bytes(const StorageSpec& storage) const override {
    const auto b = estimate_bytes(model_->files(), storage);
    WeightBytes w{b.transformer, b.t5 + b.clip_l, b.vae};
    if (storage == model_->storage()) {  // what is loaded, as measured
      const auto& held = model_->bytes();
      if (held.transformer) w.denoiser = held.transformer;
      if (held.t5 + held.clip_l) w.text = held.t5 + held.clip_l;
      if (held.vae) w.vae = held.vae;
    }
    return w;
  }

  void check(const GenerationRequest& r, int w, int h) const override {
    if (r.enable_hr) w = r.hr_target_width(w), h = r.hr_target_height(h);  // the larger pass
    (void)weight_budget(r, w, h);
  }

  void prepare(const GenerationRequest& r) override {
    cached_job_ = nullptr;
    const int big_w = r.enable_hr ? r.hr_target_width(r.width) : r.width;
    const int big_h = r.enable_hr ? r.hr_target_height(r.height) : r.height;
    const auto budget = weight_budget(r, big_w, big_h);
    if (r.storage != model_->storage()) model_->set_storage(r.storage);
    model_->set_weight_budget(budget);
    model_->set_fp8_compute(r.fp8_compute);
    const at::Device device = model_->device();
    // Phases in sequence where they do not fit together: the transformer leaves before the text
    // encoders load, and they leave before it loads again.
    // what the components may take: the host's memory, or the card's free memory beside what it holds
    const uint64_t card_free = device.is_cpu() ? 0 : backend::device_available_bytes(device);
    const uint64_t available = device.is_cpu() ? available_memory_bytes()
                               : card_free == 0 ? backend::device_total_bytes(device)
                                                : card_free + held_on_device();
    const auto bytes = estimate_bytes(model_->files(), r.storage);
    if (device.is_cuda()) {
      const uint64_t working = flux_working_bytes(big_w, big_h, r.batch_size, r.compute, shapes_.hidden);
      const bool t5_cpu = t5_on_cpu_ || flux_t5_on_cpu(device, bytes, available, working);
      if (t5_cpu && !t5_on_cpu_ && model_->t5_device() != at::Device(at::kCPU)) {
        log().info("T5-XXL ({:.1f} GB) stays on the CPU: the Flux components and {:.1f} GB of working memory do not fit in {:.1f} GB of VRAM together",
                   bytes.t5 / 1e9, working / 1e9, available / 1e9);
      }
      model_->set_t5_device(t5_cpu ? at::Device(at::kCPU) : device);
    }
    const uint64_t on_device_t5 = model_->t5_device() == device ? bytes.t5 : 0;
    // under a weight budget the phases always take turns: the budget is what the weights may take
    together_ = !budget && (available == 0 || bytes.transformer + on_device_t5 + bytes.clip_l + bytes.vae + kFluxProcessBytes < available);
    if (!together_) model_->release_transformer();
    model_->set_loras(r.loras, r.lora_mode);
    model_->load_text_encoders();
  }

  std::shared_ptr<FamilyConditioning> encode(const GenerationRequest& r, const std::string& prompt,
                                             const std::string& negative) override {
    const at::ScalarType compute = compute_dtype(r.compute, model_->device());
    const int t5_length = flux_t5_length(r, model_->dev());
    auto c = std::make_shared<FluxConditioning>();
    c->cond = ::fp8s::encode(*model_, *clip_, *t5_, prompt, t5_length, r.batch_size, compute);
    c->cfg = r.cfg != 1.0f;
    if (c->cfg) c->uncond = ::fp8s::encode(*model_, *clip_, *t5_, negative, t5_length, r.batch_size, compute);
    if (!together_) model_->release_text_encoders();
    return c;
  }

  bool sampling_needs_load() const override { return true; }
  void begin_sampling() override { model_->load_sampling(); }

  void prepare_pass(SamplingInit& init, const ImageJob* job, const GenerationRequest& r, int, int,
                    at::Generator& gen) override {
    if (!job) return;
    // the image encoded once for the request (the posterior mean, as ComfyUI's VAEEncode gives it
    // to Flux: the latent is the same for every seed)
    if (cached_job_ != job) {
      cached_latent_ = model_->vae_encode(image_tensor(job->source), compute_dtype(r.compute, model_->device())).to(at::kCPU, at::kFloat);
      cached_job_ = job;
    }
    PreparedInit prep;
    prep.latent = cached_latent_.expand({r.batch_size, -1, -1, -1}).contiguous();
    apply_latent_mask(prep, *job, r, r.batch_size, gen);  // latent noise drawn after the noise
    init.latent = prep.latent;
    init.keep = prep.keep;
  }

  at::Tensor sigmas(const GenerationRequest& r, int steps, int64_t latent_h, int64_t latent_w) const override {
    return flux_sigmas(steps, (latent_h / 2) * (latent_w / 2), model_->dev() && !option_flag(traits_.options, r.options, "no-shift"));
  }

  PassDenoiser denoiser(const FamilyConditioning& cond, const GenerationRequest& r, const SamplingInit&,
                        const std::function<void(double)>& on_model_ms, const std::atomic<bool>*) override {
    const auto& c = static_cast<const FluxConditioning&>(cond);
    const float distilled = model_->dev() ? static_cast<float>(option_number(traits_.options, r.options, "guidance")) : 0.0f;
    const FluxGuidance g{distilled, c.cfg ? r.cfg : 1.0f, c.cfg ? c.uncond.txt : at::Tensor(), c.cfg ? c.uncond.y : at::Tensor()};
    return model_->denoiser(c.cond.txt, c.cond.y, g, compute_dtype(r.compute, model_->device()), on_model_ms);
  }

  at::Tensor encode_images(const at::Tensor& images, ComputeType compute, at::Generator&) override {
    return model_->vae_encode(images, compute_dtype(compute, model_->device())).to(at::kCPU, at::kFloat);
  }

  at::Tensor decode(const at::Tensor& latent, ComputeType compute) override {
    return model_->vae_decode(latent, compute_dtype(compute, model_->device()));
  }

  std::string infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                       const std::string& model_hash) const override {
    return format_flux_infotext(r, seed, model_name, model_hash, model_->dev());
  }

  // One transformer call at t = 0.5 on random image tokens of a latent_size² latent and 32 random
  // text tokens (dev: guidance 3.5).
  std::vector<float> probe(const StorageSpec& storage, ComputeType compute, uint64_t seed, int latent_size,
                           const std::vector<LoraRequest>& loras, LoraMode mode) override {
    auto& f = *model_;
    f.set_storage(storage);
    f.set_loras(loras, mode);
    const int64_t side = std::max<int64_t>(2, latent_size / 2 * 2);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto img = flux_pack(at::randn({1, 16, side, side}, gen, at::kFloat));
    const auto txt = at::randn({1, 32, shapes_.context}, gen, at::kFloat);
    const auto y = at::randn({1, shapes_.vec}, gen, at::kFloat);
    const auto guidance = f.dev() ? at::full({1}, 3.5f) : at::Tensor();
    auto out = f.transformer(img, flux_image_ids(1, side, side), txt, at::zeros({1, 32, 3}), at::full({1}, 0.5f), y, guidance,
                             compute_dtype(compute, f.device()))
                   .to(at::kCPU, at::kFloat)
                   .contiguous();
    return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  }

 private:
  // The bytes of every component in a storage, from the headers once per storage.
  const FluxComponentBytes& estimate_bytes(const FluxFiles& files, const StorageSpec& storage) const {
    for (const auto& [s, b] : byte_estimates_) {
      if (s == storage) return b;
    }
    byte_estimates_.emplace_back(storage, flux_storage_bytes(files, storage));
    return byte_estimates_.back().second;
  }
  void check_fits(const FluxFiles& files, const StorageSpec& storage, int width, int height, int batch,
                  ComputeType compute, uint64_t available) const {
    flux_weight_budget([&](const StorageSpec& st) { return estimate_bytes(files, st); }, shapes_.hidden, storage, width,
                       height, batch, compute, available, std::nullopt);
  }
  // The transformer's weight budget for a request sampled at width x height (the larger pass):
  // what it asks, or auto (flux_weight_budget) over the memory available to this model (what the
  // machine has free plus what the model holds now); DoesNotFit when even streaming cannot fit.
  // What the model holds on its device now (T5 may be kept on the CPU beside a GPU; on a CPU it is
  // everything it holds).
  uint64_t held_on_device() const {
    const auto& held = model_->bytes();
    return held.transformer + held.clip_l + held.vae + (model_->t5_device() == model_->device() ? held.t5 : 0);
  }

  // Auto budgets are whole 256 MiB steps, so that a request does not reload the transformer for a
  // few pages of difference. On a GPU auto fits the card's free memory (the streamed blocks wait in
  // host memory); a card whose free memory is unknown keeps what was asked.
  std::optional<uint64_t> weight_budget(const GenerationRequest& r, int width, int height) const {
    const at::Device device = model_->device();
    const uint64_t free_bytes = device.is_cpu() ? available_memory_bytes() : backend::device_available_bytes(device);
    if (free_bytes == 0) return r.weight_budget;
    const uint64_t available = free_bytes + held_on_device();
    auto budget = flux_weight_budget([&](const StorageSpec& st) { return estimate_bytes(model_->files(), st); },
                                     shapes_.hidden, r.storage, width, height, r.batch_size, r.compute, available, r.weight_budget);
    if (budget && !r.weight_budget) *budget -= *budget % (256ull << 20);
    return budget;
  }
  // The storage a component is kept in (component_storage, from the types read at load).
  StorageSpec component_storage(const ComponentSource* source, StorageSpec s) const {
    if (source == &model_->files().transformer) return s;
    // the autoencoder keeps its file's float type unless --fp8-vae
    if (source == &model_->files().vae && is_quantised(s.weights) && !s.fp8_vae) s.weights = WeightType::BF16;
    const auto it = file_type_.find(source);
    if ((s.weights == WeightType::FP16 || s.weights == WeightType::BF16) && it != file_type_.end()) s.weights = it->second;
    return s;
  }

  std::string lora_dir_;
  bool t5_on_cpu_ = false;
  std::shared_ptr<const ClipTokenizer> clip_;
  std::shared_ptr<const T5Tokenizer> t5_;
  FluxShapes shapes_;
  FamilyTraits traits_;
  std::unique_ptr<FluxModel> model_;
  std::map<const ComponentSource*, WeightType> file_type_;
  mutable std::vector<std::pair<StorageSpec, FluxComponentBytes>> byte_estimates_;
  bool together_ = true;
  const ImageJob* cached_job_ = nullptr;
  at::Tensor cached_latent_;
};

}  // namespace

FamilyEntry flux_family_entry() {
  FamilyEntry e;
  e.id = "flux";
  e.label = "Flux.1 dev and schnell";
  e.detect = [](const SafetensorsFile& file) { return is_flux_file(file); };
  e.traits = [](const SafetensorsFile& file) {
    const auto contents = flux_contents(file);
    FluxShapes shapes;
    if (contents.transformer) shapes.hidden = static_cast<int>(file.at(*contents.transformer + "img_in.weight").shape.at(0));
    return flux_traits(contents.dev, shapes);
  };
  e.open = [](const LoadOptions& o, const at::Device& device) -> std::unique_ptr<FamilyModel> {
    return std::make_unique<FluxFamily>(o, device);
  };
  e.tools = flux_tools();
  e.options = flux_options(true);
  for (auto& o : flux_load_options()) e.options.push_back(std::move(o));
  e.roles = flux_roles();
  e.tools.folder_names = {diffusers_flux_transformer_names, diffusers_autoencoder_names};
  return e;
}

}  // namespace fp8s
