#include "pipeline/flux_generate.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <tuple>
#include <sstream>

#include "backend/backend.h"
#include "backend/kernel_options.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/strings.h"
#include "io/image_ops.h"
#include "lora/lora_library.h"
#include "memory/process_memory.h"
#include "memory/tracking_allocator.h"
#include "pipeline/img2img.h"
#include "pipeline/infotext.h"
#include "pipeline/model.h"
#include "pipeline/run_support.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_parser.h"
#include "text/t5_tokenizer.h"

namespace fp8s {
namespace {

constexpr uint64_t kProcessBytes = 600ull << 20;  // LibTorch, Qt and the rest of the process

// Bytes of one component's tensors under `prefix` in `storage`.
uint64_t component_bytes(const ComponentSource& c, const StorageSpec& storage_in, bool quantised, bool keep_file_type) {
  if (!c.found()) return 0;
  const SafetensorsFile f(c.path);
  const StorageSpec storage = keep_file_type ? flux_component_storage(f, c.prefix, storage_in) : storage_in;
  const uint64_t float_bytes = storage.weights == WeightType::FP32 ? 4 : 2;
  uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    if (!starts_with(t.name, c.prefix)) continue;
    const std::string name = t.name.substr(c.prefix.size());
    const bool weight = ends_with(name, ".weight") && (t.shape.size() == 2 || t.shape.size() == 4);
    const bool embedding = name.find("embed") != std::string::npos || starts_with(name, "shared.") ||
                           name.find("relative_attention_bias") != std::string::npos;
    if (name.find("scale_weight") != std::string::npos || name.find("weight_scale") != std::string::npos ||
        name.find("input_scale") != std::string::npos || name.find("scale_input") != std::string::npos) {
      continue;  // FP8 files' scales: a few bytes, read with their weights
    }
    const bool fp8 = quantised && is_fp8(storage.weights) && weight && !embedding;
    total += t.numel() * (fp8 ? 1 : float_bytes);
  }
  return total;
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

std::string storage_label(const StorageSpec& s) {
  switch (s.weights) {
    case WeightType::FP32: return "FP32";
    case WeightType::FP16: return "FP16";
    case WeightType::BF16: return "BF16";
    default: return "FP8";
  }
}

// The prompt as Flux reads it: A1111 emphasis markup removed (weights have no meaning to T5's
// or CLIP-L's plain captions here), BREAK a space.
std::string plain_prompt(const std::string& prompt) {
  std::string out;
  for (const auto& part : parse_prompt_attention(prompt)) {
    if (part.weight == -1 && part.text == "BREAK") {
      out += ' ';
    } else {
      out += part.text;
    }
  }
  return out;
}

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

// The request's sampling size: as asked, else the init image's (rounded down to 16), else the
// model's native size.
std::pair<int, int> flux_size(const GenerationRequest& r, int native) {
  auto pick = [&](int asked, int image) { return asked > 0 ? asked : r.init_image ? std::max(16, image / 16 * 16) : native; };
  return {pick(r.width, r.init_image ? r.init_image->width : 0), pick(r.height, r.init_image ? r.init_image->height : 0)};
}

// The hires pass's size (validate_flux_request has checked it is a multiple of 16).
std::pair<int, int> flux_hires_size(const GenerationRequest& r, int w, int h) {
  return {r.hr_target_width(w), r.hr_target_height(h)};
}

}  // namespace

FluxComponentBytes flux_storage_bytes(const FluxFiles& files, const StorageSpec& storage) {
  FluxComponentBytes b;
  b.transformer = component_bytes(files.transformer, storage, true, false);
  b.t5 = component_bytes(files.t5, storage, true, true);
  b.clip_l = component_bytes(files.clip_l, storage, true, true);
  b.vae = component_bytes(files.vae, storage, storage.fp8_vae, true);
  return b;
}

uint64_t flux_working_bytes(int width, int height, int batch, int hidden_size) {
  const uint64_t tokens = static_cast<uint64_t>(width / 16) * static_cast<uint64_t>(height / 16) + 512;
  // FP32 image/text streams, the modulated and MLP intermediates (about 20 hidden-wide rows a token)
  const uint64_t activations = static_cast<uint64_t>(batch) * tokens * static_cast<uint64_t>(hidden_size) * 20 * 4 + (256ull << 20);
  // the autoencoder's full-resolution levels: ~6 live 128-channel maps in 16 bits
  const uint64_t decode = static_cast<uint64_t>(batch) * static_cast<uint64_t>(width) * static_cast<uint64_t>(height) * 128 * 6 * 2;
  return std::max(activations, decode);
}

int flux_hidden_size(const FluxFiles& files) {
  return static_cast<int>(SafetensorsFile(files.transformer.path).at(files.transformer.prefix + "img_in.weight").shape[0]);
}

uint64_t flux_peak_bytes(const FluxComponentBytes& b, int width, int height, int batch, int hidden_size) {
  const uint64_t text_phase = b.t5 + b.clip_l;
  const uint64_t sample_phase = b.transformer + b.vae + flux_working_bytes(width, height, batch, hidden_size);
  return std::max(text_phase, sample_phase) + kProcessBytes;
}

void check_flux_fits(const FluxFiles& files, const StorageSpec& storage, int width, int height, int batch,
                     uint64_t available) {
  if (available == 0) return;  // unknown
  const int hidden = flux_hidden_size(files);
  const uint64_t need = flux_peak_bytes(flux_storage_bytes(files, storage), width, height, batch, hidden);
  if (need <= available) return;
  std::string msg = storage_label(storage) + " Flux at " + std::to_string(width) + "x" + std::to_string(height) +
                    " needs " + gb(need) + ", this machine has " + gb(available);
  if (!is_fp8(storage.weights)) {
    StorageSpec fp8 = storage;
    fp8.weights = WeightType::FP8_E4M3;
    const uint64_t need8 = flux_peak_bytes(flux_storage_bytes(files, fp8), width, height, batch, hidden);
    msg += "; FP8 needs " + gb(need8) + (need8 <= available ? " (use --weights fp8-e4m3)" : "");
  } else {
    msg += "; use a smaller size or batch";
  }
  throw DoesNotFit(msg);
}

int flux_t5_length(const GenerationRequest& r, bool dev) { return r.t5_max_length > 0 ? r.t5_max_length : dev ? 512 : 256; }

void validate_flux_request(const GenerationRequest& r, const FluxRunContext& ctx) {
  const auto [w, h] = flux_size(r, ctx.native_size);
  for (auto [v, name] : {std::pair{w, "width"}, std::pair{h, "height"}}) {
    if (v < 16 || v > 4096 || v % 16 != 0) {
      throw InputError(std::string("Flux ") + name + " " + std::to_string(v) + " must be a multiple of 16 in 16..4096; use e.g. " +
                       std::to_string(std::max(16, (v + 8) / 16 * 16)));
    }
  }
  if (r.steps < 1 || r.steps > 1000) throw InputError("steps must be between 1 and 1000");
  if (!std::isfinite(r.cfg) || r.cfg < 0 || r.cfg > 100) throw InputError("CFG scale must be between 0 and 100");
  if (!std::isfinite(r.guidance) || r.guidance < 0 || r.guidance > 100) {
    throw InputError("distilled guidance must be between 0 and 100 (Flux dev's default is 3.5)");
  }
  if (r.t5_max_length < 0 || r.t5_max_length > 4096) throw InputError("--t5-max-length must be between 1 and 4096 (0: the model's)");
  if (r.batch_size < 1 || r.batch_size > 64) throw InputError("batch size must be between 1 and 64");
  if (r.batch_count < 1 || r.batch_count > 10000) throw InputError("batch count must be between 1 and 10000");
  if (r.sampler != Sampler::Euler) {
    throw InputError(std::string("Flux samples with BFL's Euler on the flow; --sampler ") + sampler_name(r.sampler) + " does not apply (use euler)");
  }
  validate_image_inputs(r, w, h, 16, 16);
  validate_loras(r.loras);
  validate_lora_tags(r.prompt);
  for (const auto& tag : parse_extra_networks(r.prompt).loras) resolve_lora_name(ctx.lora_dir, tag.name);
  if (r.fp8_compute && !backend::supports_fp8_compute(ctx.model->device())) {
    throw InputError("--fp8-compute needs an NVIDIA GPU of compute capability 8.9 or newer; this model runs on " +
                     backend::describe_device(ctx.model->device()));
  }
  compute_dtype(r.compute, ctx.model->device());
  if (ctx.model->device().is_cpu()) {
    // another storage first releases what the model holds now (compare's next mode)
    const auto& held = ctx.model->bytes();
    const uint64_t freed = r.storage != ctx.model->storage() ? held.transformer + held.t5 + held.clip_l + held.vae : 0;
    const auto [fit_w, fit_h] = r.enable_hr ? flux_hires_size(r, w, h) : std::pair{w, h};  // the larger pass
    check_flux_fits(ctx.model->files(), r.storage, fit_w, fit_h, r.batch_size, available_memory_bytes() + freed);
  }
}

std::string format_flux_infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                                 const std::string& model_hash, bool dev) {
  std::ostringstream o;
  o << r.prompt << "\n";
  if (!r.negative.empty() && r.cfg != 1.0f) o << "Negative prompt: " << r.negative << "\n";
  o << "Steps: " << r.steps << ", Sampler: Euler, Schedule type: Simple, CFG scale: " << r.cfg;
  if (dev) o << ", Distilled CFG Scale: " << r.guidance;
  o << ", Seed: " << seed << ", Size: " << r.width << "x" << r.height;
  if (!model_hash.empty()) o << ", Model hash: " << model_hash;
  o << ", Model: " << model_name;
  o << ", FP8 weight: " << (is_fp8(r.storage.weights) ? std::string(weight_type_name(r.storage.weights)) : "Disable");
  if (r.t5_max_length > 0) o << ", T5 length: " << r.t5_max_length;
  o << image_infotext_fields(r, r.width, r.height);
  if (dev && r.no_shift) o << ", Shift: off";
  o << lora_infotext_fields(r);
  o << ", Weights: " << weight_type_name(r.storage.weights) << ", Compute: " << compute_type_name(r.compute);
  return o.str();
}

GenerationResult generate_flux(const FluxRunContext& ctx, const GenerationRequest& request_in, Observer* observer,
                               const std::atomic<bool>& cancel) {
  validate_flux_request(request_in, ctx);
  FluxModel& model = *ctx.model;
  GenerationRequest r = request_in;
  std::tie(r.width, r.height) = flux_size(r, ctx.native_size);
  r.seed = resolve_seed(r.seed);
  const auto start = Clock::now();
  const at::Device device = model.device();
  const at::ScalarType compute = compute_dtype(r.compute, device);
  reset_tracked_peak();
  GenerationResult result;
  trim_heap();
  result.rss_peak_is_per_request = reset_rss_peak();
  result.seed = static_cast<uint64_t>(r.seed);
  const double loaded_before = model.load_ms();
  VramPeaks vram;
  begin_phase(device, nullptr);
  backend::reset_kernel_usage();
  if (r.storage != model.storage()) model.set_storage(r.storage);
  model.set_fp8_compute(r.fp8_compute);
  const auto extra = parse_extra_networks(r.prompt);
  for (const auto& tag : extra.loras) r.loras.push_back({resolve_lora_name(ctx.lora_dir, tag.name), tag.te_multiplier, tag.unet_multiplier});
  if (!parse_extra_networks(r.negative).loras.empty()) log().warn("LoRA tags in the negative prompt are ignored (as A1111 does)");
  // Phases in sequence where they do not fit together: the transformer leaves before the text
  // encoders load, and they leave before it loads again.
  const uint64_t available = device.is_cpu() ? available_memory_bytes() : backend::device_total_bytes(device);
  const auto bytes = flux_storage_bytes(model.files(), r.storage);
  if (device.is_cuda()) {
    const auto [big_w, big_h] = r.enable_hr ? flux_hires_size(r, r.width, r.height) : std::pair{r.width, r.height};
    const uint64_t working = flux_working_bytes(big_w, big_h, r.batch_size, flux_hidden_size(model.files()));
    const bool t5_cpu = ctx.t5_on_cpu || flux_t5_on_cpu(device, bytes, available, working);
    if (t5_cpu && !ctx.t5_on_cpu && model.t5_device() != at::Device(at::kCPU)) {
      log().info("T5-XXL ({:.1f} GB) stays on the CPU: the Flux components and {:.1f} GB of working memory do not fit in {:.1f} GB of VRAM together",
                 bytes.t5 / 1e9, working / 1e9, available / 1e9);
    }
    model.set_t5_device(t5_cpu ? at::Device(at::kCPU) : device);
  }
  const uint64_t on_device_t5 = model.t5_device() == device ? bytes.t5 : 0;
  const bool together = available == 0 || bytes.transformer + on_device_t5 + bytes.clip_l + bytes.vae + kProcessBytes < available;
  if (!together) model.release_transformer();
  model.set_loras(r.loras, r.lora_mode);

  if (observer) observer->onPhase({Phase::Load, ms_since(start)});
  model.load_text_encoders();
  if (observer) observer->onPhase({Phase::Encode, ms_since(start)});
  begin_phase(device, &vram);
  emit_memory(observer, Phase::Encode, -1, start, device);
  const auto t_encode = Clock::now();
  const int t5_length = flux_t5_length(r, model.dev());
  const Encoded cond = encode(model, *ctx.clip, *ctx.t5, parse_extra_networks(r.prompt).prompt_without_tags, t5_length, r.batch_size, compute);
  const bool cfg = r.cfg != 1.0f;
  Encoded uncond;
  if (cfg) uncond = encode(model, *ctx.clip, *ctx.t5, parse_extra_networks(r.negative).prompt_without_tags, t5_length, r.batch_size, compute);
  if (!together) model.release_text_encoders();
  result.timing.encode_ms = ms_since(t_encode);
  if (cancel.load()) throw Cancelled();
  if (observer) observer->onPhase({Phase::Load, ms_since(start)});
  model.load_sampling();

  const int factor = model.vae_factor();
  const bool shift = model.dev() && !r.no_shift;
  // img2img / inpainting: the image prepared and encoded once for the request (the posterior mean,
  // as ComfyUI's VAEEncode gives it to Flux: the latent is the same for every seed)
  const std::optional<ImageJob> job = r.init_image ? std::optional<ImageJob>(prepare_image_job(r, r.width, r.height)) : std::nullopt;
  at::Tensor init_latent;
  if (job) {
    if (observer) observer->onPhase({Phase::Encode, ms_since(start)});
    const auto t = Clock::now();
    init_latent = model.vae_encode(image_tensor(job->source), compute).to(at::kCPU, at::kFloat);
    result.timing.encode_ms += ms_since(t);
  }
  const int hr_steps = r.hr_steps > 0 ? r.hr_steps : r.steps;
  const auto [hr_w, hr_h] = r.enable_hr ? flux_hires_size(r, r.width, r.height) : std::pair{r.width, r.height};
  for (int n = 0; n < r.batch_count; ++n) {
    const uint64_t seed = static_cast<uint64_t>(r.seed) + static_cast<uint64_t>(n);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    // BFL's get_noise: 16 channels at the autoencoder's resolution, from a CPU generator
    const auto noise = at::randn({r.batch_size, 16, r.height / factor, r.width / factor}, gen, at::kFloat);
    SamplingInit init;
    if (job) {
      PreparedInit prep;
      prep.latent = init_latent.expand({r.batch_size, -1, -1, -1}).contiguous();
      apply_latent_mask(prep, *job, r, r.batch_size, gen);  // latent noise drawn after the noise
      init.latent = prep.latent;
      init.keep = prep.keep;
      set_img2img_steps(init, r.steps, r.denoising_strength, false);
    }
    if (observer) observer->onPhase({Phase::Sample, ms_since(start)});
    begin_phase(device, &vram);
    auto step_start = Clock::now();
    int step_offset = 0, steps_after = r.enable_hr ? hr_steps : 0;  // the hires pass numbers its steps after the first's
    auto on_step = [&](int i, int total, double t) {
      backend::synchronize(device);
      const double step_ms = ms_since(step_start);
      result.timing.step_ms.push_back(step_ms);
      result.timing.denoise_ms.push_back(step_ms);
      if (observer) {
        StepEvent e;
        e.image_index = n;
        e.step = step_offset + i;
        e.steps = step_offset + total + steps_after;
        e.sigma = static_cast<float>(t);
        e.step_ms = step_ms;
        e.denoise_ms = step_ms;
        observer->onStep(e);
        emit_memory(observer, Phase::Sample, e.step, start, device);
      }
      if (cancel.load()) throw Cancelled();
      step_start = Clock::now();
    };
    FluxGuidance g{r.guidance, cfg ? r.cfg : 1.0f, cfg ? uncond.txt : at::Tensor(), cfg ? uncond.y : at::Tensor()};
    auto latent = model.sample(noise, cond.txt, cond.y, r.steps, g, shift, compute, on_step, init);
    if (r.enable_hr) {
      // hires fix: upscale, then img2img at the hires size from noise of the same seed (A1111)
      const int64_t lh = hr_h / factor, lw = hr_w / factor;
      auto gen2 = at::make_generator<at::CPUGeneratorImpl>(seed);
      const auto noise2 = at::randn({r.batch_size, 16, lh, lw}, gen2, at::kFloat);
      SamplingInit init2;
      if (r.hr_upscaler == HrUpscaler::Lanczos) {
        std::vector<at::Tensor> up;
        for (const auto& img : to_images(model.vae_decode(latent, compute))) up.push_back(image_tensor(resize_rgb(img, hr_w, hr_h, Filter::Lanczos)));
        init2.latent = model.vae_encode(at::cat(up), compute).to(at::kCPU, at::kFloat);
      } else if (r.hr_upscaler == HrUpscaler::Latent) {
        init2.latent = at::upsample_bilinear2d(latent.to(at::kCPU, at::kFloat), {lh, lw}, false);
      } else {
        init2.latent = at::upsample_nearest2d(latent.to(at::kCPU, at::kFloat), {lh, lw});
      }
      set_img2img_steps(init2, hr_steps, r.hr_denoising_strength, true);
      step_offset = r.steps;
      steps_after = 0;
      latent = r.hr_denoising_strength > 0 ? model.sample(noise2, cond.txt, cond.y, hr_steps, g, shift, compute, on_step, init2)
                                           : init2.latent;
    }
    if (observer) observer->onPhase({Phase::Decode, ms_since(start)});
    begin_phase(device, &vram);
    const auto t_decode = Clock::now();
    auto decoded = model.vae_decode(latent, compute);
    if (!at::isfinite(decoded).all().item<bool>()) decoded = model.vae_decode(latent, at::kFloat);
    result.timing.decode_ms += ms_since(t_decode);
    emit_memory(observer, Phase::Decode, -1, start, device);
    for (auto& img : to_images(decoded)) {
      GeneratedImage gi;
      gi.image = job ? finish_image(*job, img) : std::move(img);
      gi.seed = seed;
      gi.parameters = format_flux_infotext(r, seed, ctx.model_name, ctx.model_hash, model.dev());
      result.images.push_back(std::move(gi));
    }
  }
  result.timing.total_ms = ms_since(start);
  // Flux components load when first used (and again after a phase dropped them): this request's loads
  result.timing.load_ms = model.load_ms() - loaded_before;
  const auto& held = model.bytes();
  result.unet_bytes = held.transformer;
  result.text_bytes = held.t5 + held.clip_l;
  result.vae_bytes = held.vae;
  result.weight_bytes = result.unet_bytes + result.text_bytes + result.vae_bytes;
  finish_result(result, vram, device, observer, start);
  return result;
}

}  // namespace fp8s
