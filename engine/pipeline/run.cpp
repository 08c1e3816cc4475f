#include "pipeline/run.h"

#include <ATen/CPUGeneratorImpl.h>

#include <optional>

#include "backend/backend.h"
#include "backend/kernel_options.h"
#include "core/cancel.h"
#include "core/compute_choice.h"
#include "core/error.h"
#include "core/logging.h"
#include "pipeline/family_options.h"
#include "lora/lora_library.h"
#include "memory/process_memory.h"
#include "memory/tracking_allocator.h"
#include "pipeline/img2img.h"
#include "pipeline/run_support.h"
#include "pipeline/sample_pass.h"
#include "text/prompt_parser.h"

namespace fp8s {
namespace {

// Before a run far above the model's own size, a warning the CLI logs and the GUI shows: the work
// per step grows at least with the pixels (attention with their square), and on a CPU a step at
// 16x the native pixels takes minutes. Empty when the size is usual or the device is a GPU.
std::string long_run_notice(const FamilyTraits& t, int w, int h, const at::Device& device) {
  const double ratio = static_cast<double>(w) * h / (static_cast<double>(t.native_size) * t.native_size);
  if (device.is_cuda() || ratio < 4.0) return {};
  char text[320];
  std::snprintf(text, sizeof text,
                "%dx%d is %.0fx the pixels %s was made for (%dx%d): on a CPU each step takes at least %.0fx as long "
                "and its attention up to %.0fx; the progress line gives the time left after the first step, and "
                "Ctrl+C or Interrupt stops it",
                w, h, ratio, t.name.c_str(), t.native_size, t.native_size, ratio, ratio * ratio);
  return text;
}

std::string sampler_list(const FamilyTraits& t) {
  std::string out;
  for (auto s : t.samplers) out += (out.empty() ? "" : ", ") + std::string(sampler_name(s));
  return out;
}

// What one request's images share while they are made.
struct Run {
  const RunContext& ctx;
  FamilyModel& family;
  const GenerationRequest& r;
  Observer* observer;
  const std::atomic<bool>& cancel;
  Clock::time_point start;
  GenerationResult& result;
  VramPeaks& vram;
  const FamilyConditioning& cond;
  const ImageJob* job;

  void phase(Phase p) const {
    if (observer) observer->onPhase({p, ms_since(start)});
  }
  at::Tensor noise(at::Generator& gen, int width, int height) const {
    const auto& latent = family.traits().latent;
    return at::randn({r.batch_size, latent.channels, height / latent.factor, width / latent.factor}, gen, at::kFloat);
  }
  at::Tensor pass(int steps, const at::Tensor& noise, const SamplingInit& init, uint64_t seed, const StepCallback& cb,
                  double& denoise_ms) const {
    const int schedule_steps = init.latent.defined() ? init.schedule_steps : steps;
    const PassDenoiser d = family.denoiser(cond, r, init, [&](double ms) { denoise_ms += ms; }, &cancel);
    const at::Tensor sigmas = family.sigmas(r, schedule_steps, noise.size(2), noise.size(3));
    return sample_pass(d, family.prediction(), r.sampler, noise, sigmas, init, seed, cb);
  }
  at::Tensor decode(const at::Tensor& latent) const {
    auto decoded = family.decode(latent, r.compute);
    if (!at::isfinite(decoded).all().item<bool>()) {
      log().warn("the {} decode overflowed in {}; decoding again in fp32", family.traits().decode_label,
                 compute_type_name(r.compute));
      decoded = family.decode(latent, ComputeType::FP32);
      // a one-colour picture is never the answer: the autoencoder itself is damaged
      if (!at::isfinite(decoded).all().item<bool>()) {
        throw InputError("the " + family.traits().decode_label + " gives NaN or Inf even in fp32 from a finite latent: " +
                         "the autoencoder's weights or its latent scale are not usable (check the VAE file or the "
                         "checkpoint's; weights must be finite)");
      }
    }
    return decoded;
  }
  // The hires pass's start: the first pass's latent upscaled (or its image, through the autoencoder).
  SamplingInit hires_start(const at::Tensor& latent, int hw, int hh, at::Generator& gen) const {
    const int f = family.traits().latent.factor;
    SamplingInit init;
    if (r.hr_upscaler == HrUpscaler::Lanczos) {
      std::vector<at::Tensor> up;
      for (const auto& img : to_images(family.decode(latent, r.compute))) {
        up.push_back(image_tensor(resize_rgb(img, hw, hh, Filter::Lanczos)));
      }
      init.latent = family.encode_images(at::cat(up), r.compute, gen);
    } else if (r.hr_upscaler == HrUpscaler::Latent) {
      init.latent = at::upsample_bilinear2d(latent.to(at::kCPU, at::kFloat), {hh / f, hw / f}, false);
    } else {
      init.latent = at::upsample_nearest2d(latent.to(at::kCPU, at::kFloat), {hh / f, hw / f});
    }
    const int hr_steps = r.hr_steps > 0 ? r.hr_steps : r.steps;
    set_img2img_steps(init, hr_steps, r.hr_denoising_strength, true);
    family.prepare_pass(init, nullptr, r, hw, hh, gen);
    return init;
  }
  void image(int n);
  void decode_images(const at::Tensor& latent, uint64_t seed);
};

void Run::image(int n) {
  const uint64_t seed = static_cast<uint64_t>(r.seed) + static_cast<uint64_t>(n);
  const at::Device device = family.device();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto first_noise = noise(gen, r.width, r.height);
  SamplingInit init;
  if (job) {
    phase(Phase::Encode);  // the init image, this seed's posterior
    const auto t = Clock::now();
    family.prepare_pass(init, job, r, r.width, r.height, gen);  // drawn after the noise
    set_img2img_steps(init, r.steps, r.denoising_strength, false);
    result.timing.encode_ms += ms_since(t);
  } else {
    family.prepare_pass(init, nullptr, r, r.width, r.height, gen);
  }
  phase(Phase::Sample);
  begin_phase(device, &vram);
  auto step_start = Clock::now();
  double denoise_ms = 0;
  double waited_ms = family.stream_stats().wait_ms;  // the streaming's transfer wait so far
  const int hr_steps = r.hr_steps > 0 ? r.hr_steps : r.steps;
  int step_offset = 0;                           // the hires pass numbers its steps after the first's
  int steps_after = r.enable_hr ? hr_steps : 0;  // and the first pass counts them in its total
  int first_pass_steps = 0;
  const StepCallback on_step = [&](int i, int total, float sigma, const at::Tensor&, const at::Tensor& denoised) {
    // NaN or Inf never becomes a picture (issue 54): a step that gives them stops the run, naming
    // what can cause them
    if (!at::isfinite(denoised).all().item<bool>()) {
      throw InputError("the " + family.traits().denoiser_label + " gave NaN or Inf at step " + std::to_string(step_offset + i + 1) +
                       ": a weight of the model, a LoRA or an embedding is not finite, or the prompt's emphasis is too "
                       "large (check the files and the weights in the prompt; weights must be finite)");
    }
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
      const double waited = family.stream_stats().wait_ms;
      e.transfer_wait_ms = waited - waited_ms;
      waited_ms = waited;
      e.preview = latent_preview(denoised, family.traits().latent);
      observer->onStep(e);
      emit_memory(observer, Phase::Sample, e.step, start, device);
    }
    if (cancel.load()) throw Cancelled();
    denoise_ms = 0;
    step_start = Clock::now();
  };
  auto latent = pass(r.steps, first_noise, init, seed, on_step, denoise_ms);
  if (r.enable_hr) {
    // hires fix: upscale, then img2img at the hires size from noise of the same seed (A1111)
    const int hw = r.hr_target_width(r.width), hh = r.hr_target_height(r.height);
    auto gen2 = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto noise2 = noise(gen2, hw, hh);
    const SamplingInit init2 = hires_start(latent, hw, hh, gen2);
    step_offset = first_pass_steps;
    steps_after = 0;
    latent = r.hr_denoising_strength > 0 ? pass(hr_steps, noise2, init2, seed, on_step, denoise_ms) : init2.latent;
  }
  decode_images(latent, seed);
}

// The latent decoded into this seed's images, each with its infotext (img2img's finished against the job).
void Run::decode_images(const at::Tensor& latent, uint64_t seed) {
  const at::Device device = family.device();
  phase(Phase::Decode);
  begin_phase(device, &vram);
  const auto t_decode = Clock::now();
  const auto decoded = decode(latent);
  result.timing.decode_ms += ms_since(t_decode);
  emit_memory(observer, Phase::Decode, -1, start, device);
  for (auto& img : to_images(decoded)) {
    GeneratedImage g;
    g.image = job ? finish_image(*job, img) : std::move(img);
    g.seed = seed;
    g.parameters = family.infotext(r, seed, ctx.model_name, ctx.model_hash);
    result.images.push_back(std::move(g));
  }
}

}  // namespace

void validate_run(const RunContext& ctx, const GenerationRequest& request) {
  const FamilyModel& f = *ctx.family;
  // the checks (the memory estimate among them) see the type the run computes in
  GenerationRequest r = request;
  r.compute = resolve_compute(request.compute, f.device().is_cuda()).type;
  const auto& t = f.traits();
  validate_request(r, t.native_size, t.size_multiple, t.min_size);
  check_options(t.options, r.options, t.name);
  if (!r.controlnets.empty() && !t.controlnet) {
    throw InputError("ControlNet works with SD 1.x and SDXL models; " + t.name + " takes none (remove --controlnet)");
  }
  if (!t.offers(r.sampler)) {
    throw InputError(t.name + " does not offer the sampler " + sampler_name(r.sampler) + "; use one of " + sampler_list(t));
  }
  for (const auto& tag : parse_extra_networks(r.prompt).loras) resolve_lora_name(ctx.lora_dir, tag.name);
  const auto& device = f.device();
  compute_dtype(r.compute, device);  // refuses FP16 compute on the CPU
  if (r.fp8_compute && !backend::supports_fp8_compute(device)) {
    throw InputError("--fp8-compute needs an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper) and a "
                     "CUDA build of LibTorch 2.4+; this model runs on " + backend::describe_device(device));
  }
  if (r.fp8_compute && r.storage.weights != WeightType::FP8_E4M3) {
    throw InputError("--fp8-compute multiplies E4M3 weights in FP8: use it with --weights fp8-e4m3");
  }
  const int w = request_width(r, t.native_size, t.size_multiple, t.min_size);
  const int h = request_height(r, t.native_size, t.size_multiple, t.min_size);
  f.check(r, w, h);
}

GenerationResult run_generation(const RunContext& ctx, const GenerationRequest& request_in, Observer* observer,
                                const std::atomic<bool>& cancel) {
  FamilyModel& f = *ctx.family;
  const auto& t = f.traits();
  const CancelScope cancel_scope(&cancel);  // the cancel points inside steps, encodes and decodes
  GenerationRequest r = request_in;
  const ComputeChoice compute = resolve_compute(r.compute, f.device().is_cuda());
  r.compute = compute.type;  // every family, the estimate and the infotext see the type chosen
  log().info("compute: {}", describe(compute));
  if (!compute.warning.empty()) log().warn("{}", compute.warning);
  validate_run(ctx, r);
  r.width = request_width(r, t.native_size, t.size_multiple, t.min_size);
  r.height = request_height(r, t.native_size, t.size_multiple, t.min_size);
  r.seed = resolve_seed(r.seed);
  const int largest_w = r.enable_hr ? r.hr_target_width(r.width) : r.width;
  const int largest_h = r.enable_hr ? r.hr_target_height(r.height) : r.height;
  if (const std::string notice = long_run_notice(t, largest_w, largest_h, f.device()); !notice.empty()) {
    log().warn("{}", notice);
    if (observer) observer->onNotice(notice);
  }
  const auto start = Clock::now();
  reset_tracked_peak();
  GenerationResult result;
  trim_heap();  // what earlier requests freed goes back to the kernel: the peak below is this request's
  result.rss_peak_is_per_request = reset_rss_peak();  // peaks are per request where the kernel permits
  result.seed = static_cast<uint64_t>(r.seed);
  const at::Device device = f.device();
  VramPeaks vram;
  begin_phase(device, nullptr);
  backend::reset_kernel_usage();
  const auto pos = parse_extra_networks(r.prompt);
  const auto neg = parse_extra_networks(r.negative);
  for (const auto& tag : pos.loras) {  // validate_request has checked their multipliers
    r.loras.push_back({resolve_lora_name(ctx.lora_dir, tag.name), tag.te_multiplier, tag.unet_multiplier});
  }
  if (!neg.loras.empty()) log().warn("LoRA tags in the negative prompt are ignored (as A1111 does)");
  const double loaded_before = f.load_ms();
  const bool switching = r.storage != f.storage();
  if (switching && observer) observer->onPhase({Phase::Load, ms_since(start)});
  f.prepare(r);
  // what prepare released (another storage, another weight budget: the previous weights) and
  // loaded is not this generation's footprint: the peaks start from what the model holds now
  reset_tracked_peak();
  trim_heap();  // the previous weights' pages go back to the kernel
  result.rss_peak_is_per_request = reset_rss_peak();
  begin_phase(device, nullptr);
  if (observer) observer->onPhase({Phase::Encode, ms_since(start)});
  begin_phase(device, &vram);
  emit_memory(observer, Phase::Encode, -1, start, device);
  const auto t_encode = Clock::now();
  const auto cond = f.encode(r, pos.prompt_for_encoders, neg.prompt_for_encoders);
  result.timing.encode_ms = ms_since(t_encode);
  if (cancel.load()) throw Cancelled();
  if (f.sampling_needs_load() && observer) observer->onPhase({Phase::Load, ms_since(start)});
  f.begin_sampling();
  f.reset_stream_stats();
  struct EndSampling {
    FamilyModel& family;
    ~EndSampling() { family.end_sampling(); }
  } end_sampling{f};
  // img2img / inpainting: the images prepared once for the whole request
  const std::optional<ImageJob> job =
      r.init_image ? std::optional<ImageJob>(prepare_image_job(r, r.width, r.height)) : std::nullopt;
  Run run{ctx, f, r, observer, cancel, start, result, vram, *cond, job ? &*job : nullptr};
  for (int n = 0; n < r.batch_count; ++n) run.image(n);
  result.timing.total_ms = ms_since(start);
  // the loads this request made (a storage switch, components loaded when used), else the engine's
  const double loaded = f.load_ms() - loaded_before;
  result.timing.load_ms = loaded > 0 ? loaded : ctx.load_ms;
  const auto bytes = f.weight_bytes(f.storage());
  result.weight_bytes = bytes.total();
  result.unet_bytes = bytes.denoiser;
  result.text_bytes = bytes.text;
  result.vae_bytes = bytes.vae;
  result.control_bytes = bytes.control;
  const auto streamed = f.stream_stats();
  result.streamed_bytes = streamed.bytes_read;
  result.stream_read_ms = streamed.read_ms;
  result.transfer_wait_ms = streamed.wait_ms;
  finish_result(result, vram, device, observer, start);
  return result;
}

}  // namespace fp8s
