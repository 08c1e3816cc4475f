#include "pipeline/engine.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include "backend/backend.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/sha256.h"
#include "lora/lora_library.h"
#include "memory/process_memory.h"
#include "memory/tracking_allocator.h"
#include "pipeline/conditioning.h"
#include "pipeline/embeddings.h"
#include "pipeline/img2img.h"
#include "pipeline/flux_generate.h"
#include "pipeline/model.h"
#include "pipeline/run_support.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"
#include "text/t5_tokenizer.h"

namespace fp8s {
namespace {

// A1111's "Approx cheap" latent -> RGB preview for SD 1.x latents.
RgbImage latent_preview(const at::Tensor& latent) {
  static const float coefs[4][3] = {
      {0.298f, 0.207f, 0.208f}, {0.187f, 0.286f, 0.173f}, {-0.158f, 0.189f, 0.264f}, {-0.184f, -0.271f, -0.473f}};
  auto coef = at::from_blob(const_cast<float*>(&coefs[0][0]), {4, 3}, at::kFloat);
  auto rgb = at::einsum("lxy,lr->xyr", {latent[0].to(at::kFloat), coef});
  rgb = ((rgb + 1) * 127.5).clamp(0, 255).round().to(at::kByte).contiguous();
  RgbImage img;
  img.height = static_cast<int>(rgb.size(0));
  img.width = static_cast<int>(rgb.size(1));
  img.pixels.assign(rgb.data_ptr<uint8_t>(), rgb.data_ptr<uint8_t>() + rgb.numel());
  return img;
}

}  // namespace

struct Engine::Impl {
  explicit Impl(const LoadOptions& o) : options(o), embeddings(o.embeddings_dir) {}
  LoadOptions options;
  backend::KernelOptions kernels;  // this engine's, in effect on its thread while it loads and runs (KernelScope)
  EmbeddingLibrary embeddings;
  std::unique_ptr<Model> model;
  std::unique_ptr<FluxModel> flux;  // a Flux model instead (its components load on first use)
  std::shared_ptr<const T5Tokenizer> t5_tokenizer;
  std::shared_ptr<const ClipTokenizer> tokenizer;  // found before the weights are read
  std::string model_hash;
  double load_ms = 0;

  FluxRunContext flux_context() const {
    FluxRunContext c{flux.get(), tokenizer.get(), t5_tokenizer.get(), stem_of(options.checkpoint), model_hash, load_ms, 1024, options.lora_dir,
                     options.flux.t5_on_cpu};
    // the tiny reference transformers are far narrower than 3072: their native size is small too
    const auto& t = flux->files().transformer;
    if (SafetensorsFile(t.path).at(t.prefix + "img_in.weight").shape[0] < 3072) c.native_size = 64;
    return c;
  }
  int native_size() const {
    if (flux) return flux_context().native_size;
    const auto& c = model->config();
    if (c.unet.model_channels < 320) return 64;
    return c.arch == Arch::SDXL_BASE ? 1024 : 512;
  }
  int text_layers() const {
    const auto& t = model->config().text_encoders;
    return t.empty() ? 12 : t.front().layers;
  }
};

std::vector<DeviceChoice> available_devices() {
  std::vector<DeviceChoice> out{{"cpu", backend::describe_device(at::Device(at::kCPU))}};
  for (int i = 0; i < backend::cuda_device_count(); ++i) {
    const at::Device d(at::kCUDA, static_cast<c10::DeviceIndex>(i));
    out.push_back({"cuda:" + std::to_string(i), backend::describe_device(d)});
  }
  return out;
}

namespace {
// A vocabulary with more ids than a text encoder's token embedding has rows would index past it at
// the first prompt: refused at load, from the header, naming both numbers.
void check_vocabulary_fits(const ClipTokenizer& tokenizer, const std::string& checkpoint) {
  const SafetensorsFile file(checkpoint);
  for (const auto& tc : config_for(file).text_encoders) {
    const std::string key = tc.prefix + (tc.open_clip_layout ? "token_embedding.weight" : "embeddings.token_embedding.weight");
    const auto* rec = file.find(key);
    const int64_t rows = rec && !rec->shape.empty() ? rec->shape[0] : tc.vocab_size;
    if (static_cast<int64_t>(tokenizer.vocab_size()) > rows) {
      throw InputError(checkpoint + ": the tokenizer vocabulary has " + std::to_string(tokenizer.vocab_size()) +
                       " tokens but the " + tc.name + " text encoder's token embedding has " + std::to_string(rows) +
                       " rows; use the vocabulary that belongs to this model (--vocab)");
    }
  }
}
}  // namespace

Engine::Engine(const LoadOptions& options, Observer* observer) : impl_(std::make_unique<Impl>(options)) {
  const auto start = Clock::now();
  if (options.checkpoint.empty()) throw std::invalid_argument("Engine: LoadOptions.checkpoint is empty");
  const at::Device device = backend::resolve_device(options.device);  // a bad --device fails before any read
  impl_->kernels = options.kernels ? *options.kernels : backend::kernel_options_from_environment();
  const backend::KernelScope kernels(impl_->kernels);
  log().info("kernels: {}", backend::describe(impl_->kernels));
  if (observer) observer->onPhase({Phase::Load, 0});
  begin_phase(device, nullptr);
  emit_memory(observer, Phase::Load, -1, start, device);
  // The vocabulary is looked up before the weights are read (a real checkpoint is GBs): a missing
  // one fails in a moment. A missing checkpoint is left to the loader, whose error names it.
  const bool flux = std::filesystem::exists(options.checkpoint) && is_flux_file(SafetensorsFile(options.checkpoint));
  if (flux) {
    // Flux: the components found and the memory checked before any weight is read
    auto files = resolve_flux_files(options.checkpoint, options.flux.t5, options.flux.clip_l, options.flux.vae);
    impl_->tokenizer = std::make_shared<const ClipTokenizer>(ClipTokenizer::find(options.vocab, options.checkpoint));
    impl_->t5_tokenizer = std::make_shared<const T5Tokenizer>(T5Tokenizer::find(options.flux.t5_tokenizer, options.checkpoint));
    if (device.is_cpu()) check_flux_fits(files, options.storage, 512, 512, 1, available_memory_bytes());
    impl_->flux = std::make_unique<FluxModel>(std::move(files), options.storage, device);
  } else if (std::filesystem::exists(options.checkpoint)) {
    impl_->tokenizer = std::make_shared<const ClipTokenizer>(ClipTokenizer::find(options.vocab, options.checkpoint));
    check_vocabulary_fits(*impl_->tokenizer, options.checkpoint);
  }
  if (!flux) impl_->model = std::make_unique<Model>(impl_->options.checkpoint, options.storage, device);
  if (device.is_cuda()) log().info("running on {}", backend::describe_device(device));
  impl_->model_hash = legacy_model_hash(impl_->options.checkpoint);
  impl_->load_ms = ms_since(start);
  emit_memory(observer, Phase::Load, -1, start, device);
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

std::shared_ptr<const ClipTokenizer> Engine::tokenizer() const { return impl_->tokenizer; }

ModelInfo Engine::info() const {
  ModelInfo i;
  i.path = impl_->options.checkpoint;
  if (impl_->flux) {
    const auto& f = *impl_->flux;
    i.architecture = f.dev() ? "Flux.1 dev" : "Flux.1 schnell";
    i.storage = weight_type_name(f.storage().weights);
    i.kernels = backend::describe(impl_->kernels);
    const auto b = flux_storage_bytes(f.files(), f.storage());
    i.flux = true;
    i.flux_dev = f.dev();
    const auto& files = f.files();
    const std::pair<const char*, std::pair<const ComponentSource*, uint64_t>> parts[] = {
        {"transformer", {&files.transformer, b.transformer}}, {"T5-XXL", {&files.t5, b.t5}},
        {"CLIP-L", {&files.clip_l, b.clip_l}}, {"autoencoder", {&files.vae, b.vae}}};
    for (const auto& [name, part] : parts) {
      const auto& [source, bytes] = part;
      ComponentInfo c{name, source->path, "not found", bytes};
      if (source->found()) {
        StorageSpec s = f.storage();
        // the autoencoder keeps its file's float type unless --fp8-vae
        if (source == &files.vae && is_fp8(s.weights) && !s.fp8_vae) s.weights = WeightType::BF16;
        if (source != &files.transformer) s = flux_component_storage(SafetensorsFile(source->path), source->prefix, s);
        c.storage = weight_type_name(s.weights);
      }
      i.components.push_back(std::move(c));
    }
    i.unet_bytes = b.transformer;
    i.text_bytes = b.t5 + b.clip_l;
    i.vae_bytes = b.vae;
    i.native_size = impl_->native_size();
    i.device = backend::describe_device(f.device());
    i.gpu = f.device().is_cuda();
    i.device_total_bytes = backend::device_total_bytes(f.device());
    return i;
  }
  i.architecture = impl_->model->detection().description();
  i.storage = weight_type_name(impl_->model->storage().weights);
  i.source_note = impl_->model->source_note();
  i.kernels = backend::describe(impl_->kernels);
  const auto b = impl_->model->weight_bytes();
  i.unet_bytes = b.unet;
  i.text_bytes = b.text;
  i.vae_bytes = b.vae;
  i.native_size = impl_->native_size();
  const auto& device = impl_->model->device();
  i.device = backend::describe_device(device);
  i.gpu = device.is_cuda();
  i.device_total_bytes = backend::device_total_bytes(device);
  return i;
}

std::vector<float> Engine::unet_probe(const StorageSpec& storage, ComputeType compute, uint64_t seed,
                                     int latent_size, const std::vector<LoraRequest>& loras,
                                     LoraMode lora_mode) {
  const backend::KernelScope kernels(impl_->kernels);
  if (impl_->flux) {
    // Flux: one transformer call at t = 0.5 on random image tokens of a latent_size² latent and 32
    // random text tokens (dev: guidance 3.5)
    auto& f = *impl_->flux;
    f.set_storage(storage);
    f.set_loras(loras, lora_mode);
    const SafetensorsFile file(f.files().transformer.path);
    const auto& prefix = f.files().transformer.prefix;
    const int64_t context = file.at(prefix + "txt_in.weight").shape.at(1);
    const int64_t vec = file.at(prefix + "vector_in.in_layer.weight").shape.at(1);
    const int64_t side = std::max<int64_t>(2, latent_size / 2 * 2);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto img = flux_pack(at::randn({1, 16, side, side}, gen, at::kFloat));
    const auto txt = at::randn({1, 32, context}, gen, at::kFloat);
    const auto y = at::randn({1, vec}, gen, at::kFloat);
    const auto guidance = f.dev() ? at::full({1}, 3.5f) : at::Tensor();
    auto out = f.transformer(img, flux_image_ids(1, side, side), txt, at::zeros({1, 32, 3}), at::full({1}, 0.5f), y, guidance,
                             compute_dtype(compute, f.device()))
                   .to(at::kCPU, at::kFloat)
                   .contiguous();
    return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  }
  auto& model = *impl_->model;
  model.set_storage(storage);
  model.set_loras(loras, lora_mode);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = at::randn({1, 4, latent_size, latent_size}, gen, at::kFloat);
  auto ctx = at::randn({1, 77, model.config().unet.context_dim}, gen, at::kFloat);
  if (model.is_inpainting()) {  // a 9-channel UNet: a full mask and an empty masked-image latent
    x = at::cat({x, at::ones({1, 1, latent_size, latent_size}), at::zeros({1, 4, latent_size, latent_size})}, 1);
  }
  auto eps = model.unet(x, at::full({1}, 500.0f), ctx, {}, compute).contiguous();
  return std::vector<float>(eps.data_ptr<float>(), eps.data_ptr<float>() + eps.numel());
}

void Engine::validate(const GenerationRequest& r) const {
  if (impl_->flux) return validate_flux_request(r, impl_->flux_context());
  validate_request(r, impl_->native_size(), impl_->text_layers());
  const auto& device = impl_->model->device();
  compute_dtype(r.compute, device);  // refuses FP16 compute on the CPU
  if (r.fp8_compute && !backend::supports_fp8_compute(device)) {
    throw InputError("--fp8-compute needs an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper) and a "
                     "CUDA build of LibTorch 2.4+; this model runs on " + backend::describe_device(device));
  }
  if (r.fp8_compute && r.storage.weights != WeightType::FP8_E4M3) {
    throw InputError("--fp8-compute multiplies E4M3 weights in FP8: use it with --weights fp8-e4m3");
  }
  const auto& c = impl_->model->config();
  int w = request_width(r, impl_->native_size());
  int h = request_height(r, impl_->native_size());
  if (r.enable_hr) w = r.hr_target_width(w), h = r.hr_target_height(h);  // the larger pass
  const uint64_t need = estimate_working_bytes(c.unet, c.vae, w, h, r.batch_size, r.compute);
  const uint64_t available = available_memory_bytes();
  if (available > 0 && need > available) {
    char msg[320];
    std::snprintf(msg, sizeof msg,
                  "%dx%d at batch size %d needs about %.1f GB of working memory (estimate) but %.1f GB is "
                  "available; use a smaller size or batch size",
                  w, h, r.batch_size, need / 1e9, available / 1e9);
    throw InputError(msg);
  }
}

GenerationResult Engine::generate(const GenerationRequest& request_in, Observer* observer,
                                  const std::atomic<bool>& cancel) {
  if (impl_->flux) {
    const backend::KernelScope kernels(impl_->kernels);
    return generate_flux(impl_->flux_context(), request_in, observer, cancel);
  }
  validate(request_in);
  GenerationRequest r = request_in;
  r.width = request_width(r, impl_->native_size());
  r.height = request_height(r, impl_->native_size());
  r.seed = resolve_seed(r.seed);
  const auto start = Clock::now();
  const backend::KernelScope kernels(impl_->kernels);
  reset_tracked_peak();
  GenerationResult result;
  trim_heap();  // what earlier requests freed goes back to the kernel: the peak below is this request's
  result.rss_peak_is_per_request = reset_rss_peak();  // peaks are per request where the kernel permits
  result.seed = static_cast<uint64_t>(r.seed);
  result.timing.load_ms = impl_->load_ms;
  auto& model = *impl_->model;
  const at::Device device = model.device();
  VramPeaks vram;
  begin_phase(device, nullptr);
  if (r.storage != model.storage() || !model.reload_error().empty()) {
    if (observer) observer->onPhase({Phase::Load, ms_since(start)});
    const auto t = Clock::now();
    model.set_storage(r.storage);
    result.timing.load_ms = ms_since(t);
    reset_tracked_peak();  // the switch is a load, not part of this generation's footprint
    trim_heap();           // the previous weights' pages go back to the kernel
    result.rss_peak_is_per_request = reset_rss_peak();
    begin_phase(device, nullptr);
  }
  backend::reset_kernel_usage();
  const auto pos = parse_extra_networks(r.prompt);
  const auto neg = parse_extra_networks(r.negative);
  std::vector<LoraRequest> loras = r.loras;
  for (const auto& tag : pos.loras) {  // validate_request has checked their multipliers
    loras.push_back({resolve_lora_name(impl_->options.lora_dir, tag.name), tag.te_multiplier, tag.unet_multiplier});
  }
  if (!neg.loras.empty()) log().warn("LoRA tags in the negative prompt are ignored (as A1111 does)");
  model.set_loras(loras, r.lora_mode);
  model.set_fp8_compute(r.fp8_compute);
  r.loras = loras;
  if (observer) observer->onPhase({Phase::Encode, ms_since(start)});
  begin_phase(device, &vram);
  emit_memory(observer, Phase::Encode, -1, start, device);
  const auto t_encode = Clock::now();
  std::vector<int> widths;
  for (const auto& te : model.config().text_encoders) widths.push_back(te.width);
  const auto embeddings = impl_->embeddings.used_by({pos.prompt_without_tags, neg.prompt_without_tags}, widths);
  const Conditioning c = encode_conditioning(model, *impl_->tokenizer, pos.prompt_without_tags,
                                             neg.prompt_without_tags, r, r.width, r.height, embeddings);
  const std::string ti_hashes = ti_hashes_field(embeddings);
  result.timing.encode_ms = ms_since(t_encode);

  const std::string model_name = stem_of(impl_->options.checkpoint);
  // img2img / inpainting: the images prepared once for the whole request
  const std::optional<ImageJob> job =
      r.init_image ? std::optional<ImageJob>(prepare_image_job(r, r.width, r.height)) : std::nullopt;
  const int hr_steps = r.hr_steps > 0 ? r.hr_steps : r.steps;
  for (int n = 0; n < r.batch_count; ++n) {
    const uint64_t seed = static_cast<uint64_t>(r.seed) + static_cast<uint64_t>(n);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto noise = at::randn({r.batch_size, 4, r.height / 8, r.width / 8}, gen, at::kFloat);
    SamplingParams p{r.sampler, r.schedule, r.steps, r.cfg, seed, {}};
    if (job) {
      if (observer) observer->onPhase({Phase::Encode, ms_since(start)});  // the init image, this seed's posterior
      const auto t = Clock::now();
      auto prep = prepare_init(model, *job, r, r.batch_size, gen);  // the posterior drawn after the noise
      p.init.latent = prep.latent;
      p.init.keep = prep.keep;
      p.init.image_cond = prep.image_cond;
      set_img2img_steps(p.init, r.steps, r.denoising_strength, false);
      result.timing.encode_ms += ms_since(t);
    } else if (model.is_inpainting()) {
      p.init.image_cond = txt2img_image_cond(model, r.batch_size, r.height, r.width, r.compute, gen);
    }
    if (observer) observer->onPhase({Phase::Sample, ms_since(start)});
    begin_phase(device, &vram);
    auto step_start = Clock::now();
    double denoise_ms = 0;
    int step_offset = 0;                                // the hires pass numbers its steps after the first's
    int steps_after = r.enable_hr ? hr_steps : 0;       // and the first pass counts them in its total
    int first_pass_steps = 0;
    StepCallback on_step = [&](int i, int total, float sigma, const at::Tensor&, const at::Tensor& denoised) {
      backend::synchronize(device);  // the step's device work is done before the clock is read
      const double step_ms = ms_since(step_start);
      if (step_offset == 0) first_pass_steps = total;
      result.timing.step_ms.push_back(step_ms);
      result.timing.denoise_ms.push_back(denoise_ms);
      if (observer) {
        StepEvent e;
        e.image_index = n;
        e.step = step_offset + i + 1;
        e.steps = step_offset + total + steps_after;
        e.sigma = sigma;
        e.step_ms = step_ms;
        e.denoise_ms = denoise_ms;
        e.preview = latent_preview(denoised);
        observer->onStep(e);
        emit_memory(observer, Phase::Sample, e.step, start, device);
      }
      if (cancel.load()) throw Cancelled();
      denoise_ms = 0;
      step_start = Clock::now();
    };
    auto latent = model.sample(noise, c.cond, c.uncond, p, r.compute, on_step, &cancel,
                               [&](double ms) { denoise_ms += ms; }, c.y_cond, c.y_uncond);
    if (r.enable_hr) {
      // hires fix: upscale, then img2img at the hires size from noise of the same seed (A1111)
      const int hw = r.hr_target_width(r.width), hh = r.hr_target_height(r.height);
      auto gen2 = at::make_generator<at::CPUGeneratorImpl>(seed);
      auto noise2 = at::randn({r.batch_size, 4, hh / 8, hw / 8}, gen2, at::kFloat);
      SamplingParams p2{r.sampler, r.schedule, hr_steps, r.cfg, seed, {}};
      if (r.hr_upscaler == HrUpscaler::Lanczos) {
        std::vector<at::Tensor> up;
        for (const auto& img : to_images(model.vae_decode(latent, r.compute))) {
          up.push_back(image_tensor(resize_rgb(img, hw, hh, Filter::Lanczos)));
        }
        p2.init.latent = encode_latent(model, at::cat(up), r.compute, gen2);
      } else if (r.hr_upscaler == HrUpscaler::Latent) {
        p2.init.latent = at::upsample_bilinear2d(latent, {hh / 8, hw / 8}, false);
      } else {
        p2.init.latent = at::upsample_nearest2d(latent, {hh / 8, hw / 8});
      }
      set_img2img_steps(p2.init, hr_steps, r.hr_denoising_strength, true);
      if (model.is_inpainting()) p2.init.image_cond = txt2img_image_cond(model, r.batch_size, hh, hw, r.compute, gen2);
      step_offset = first_pass_steps;
      steps_after = 0;
      latent = r.hr_denoising_strength > 0
                   ? model.sample(noise2, c.cond, c.uncond, p2, r.compute, on_step, &cancel,
                                  [&](double ms) { denoise_ms += ms; }, c.y_cond, c.y_uncond)
                   : p2.init.latent;
    }
    if (observer) observer->onPhase({Phase::Decode, ms_since(start)});
    begin_phase(device, &vram);
    const auto t_decode = Clock::now();
    auto decoded = model.vae_decode(latent, r.compute);
    if (!at::isfinite(decoded).all().item<bool>()) {
      log().warn("the VAE decode overflowed in {}; decoding again in fp32", compute_type_name(r.compute));
      decoded = model.vae_decode(latent, ComputeType::FP32);
    }
    result.timing.decode_ms += ms_since(t_decode);
    emit_memory(observer, Phase::Decode, -1, start, device);
    for (auto& img : to_images(decoded)) {
      GeneratedImage g;
      g.image = job ? finish_image(*job, img) : std::move(img);
      g.seed = seed;
      g.parameters = format_infotext(r, seed, model_name, impl_->model_hash, r.width, r.height);
      if (!ti_hashes.empty()) g.parameters += ", " + ti_hashes;
      result.images.push_back(std::move(g));
    }
  }
  result.timing.total_ms = ms_since(start);
  const auto bytes = model.weight_bytes();
  result.weight_bytes = bytes.total();
  result.unet_bytes = bytes.unet;
  result.text_bytes = bytes.text;
  result.vae_bytes = bytes.vae;
  finish_result(result, vram, device, observer, start);
  return result;
}

}  // namespace fp8s
