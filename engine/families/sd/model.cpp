#include "families/sd/model.h"
#include "pipeline/run_support.h"

#include "pipeline/sample_pass.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/backend.h"
#include "core/error.h"
#include "core/logging.h"
#include "families/sd/control.h"
#include "lora/lora.h"
#include "lora/lora_apply.h"
#include "pipeline/request.h"
#include "models/inspect.h"
#include "models/unet.h"
#include "models/text_encoder.h"
#include "models/vae.h"
#include "sampling/cfg_denoiser.h"

namespace fp8s {


Model::Model(const std::string& checkpoint, const StorageSpec& storage, const at::Device& device)
    : file_(std::make_unique<SafetensorsFile>(checkpoint)), storage_(storage), device_(device) {
  detection_ = detect_architecture(*file_);
  if (file_->metadata().count("ldm.config") == 0 && detection_.arch != Arch::SD1 &&
      detection_.arch != Arch::SDXL_BASE) {
    throw InputError(checkpoint + ": detected " + detection_.description() +
                     ", which is not supported yet (supported: SD 1.x and SDXL base checkpoints)");
  }
  config_ = config_for(*file_);
  // What cannot run (NVFP4, MXFP8, int8/4-bit) is refused here (inspect reads the file's FP8
  // scheme), before any weight is read.
  const InspectReport report = inspect_checkpoint(*file_);
  if (const auto& s = report.fp8; !s.layout.empty()) {
    log().info("{}: FP8 layout {} ({} F8 tensors, {} weights scaled, {} per channel, {} input scales)",
               checkpoint, s.layout, s.fp8_tensors, s.scaled_weights, s.channel_scaled, s.input_scales);
  }
  source_ = report.own_storage;
  load_all();
  file_->release_mapping();
}

Model::~Model() = default;

ResidencyPlan unet_residency_plan(UNetImpl& unet, const SafetensorsFile& file, const StorageSpec& storage, uint64_t budget) {
  return plan_network(unet, unet.blocks(), file, kUNetPrefix, storage, is_quantised(storage.weights), false, budget);
}

ResidencyPlan unet_residency_plan(const SafetensorsFile& file, const StorageSpec& storage, uint64_t budget) {
  UNetImpl unet(config_for(file).unet);  // placeholders: no weight is allocated
  return unet_residency_plan(unet, file, storage, budget);
}

void Model::load_unet() {
  const bool quantise = is_quantised(storage_.weights);
  streaming_.clear();
  unet_ = std::make_shared<UNetImpl>(config_.unet);
  if (budget_) streaming_.plan = unet_residency_plan(*unet_, *file_, storage_, *budget_);
  bytes_.denoiser =
      load_module_weights(*unet_, *file_, kUNetPrefix, storage_, quantise, {}, {}, device_, false, streamed_prefixes(streaming_.plan)).bytes;
  if (!streaming_.plan.any()) return;
  streaming_.streamer = network_streamer(streaming_.plan, unet_->blocks(), *file_, kUNetPrefix, storage_, quantise, false, device_);
  unet_->set_block_hooks(streaming_.streamer.get());
  log().info("UNet, {} budget {:.2f} GB: {}", weight_type_name(storage_.weights), static_cast<double>(*budget_) / 1e9,
             streaming_.plan.describe());
}

void Model::set_weight_budget(std::optional<uint64_t> budget, bool reload_now) {
  if (budget == budget_ && reload_error_.empty()) return;
  budget_ = budget;
  if (reload_now) reload();
}

StreamStats Model::stream_stats() const { return streaming_.stats(); }

void Model::reset_stream_stats() { streaming_.reset_stats(); }

void Model::end_streaming() { streaming_.end(); }

void Model::load_all() {
  const bool fp8_text_unet = is_quantised(storage_.weights);
  const BuildOn build(device_);
  bytes_ = {};
  text_.clear();
  for (const auto& tc : config_.text_encoders) {
    auto te = std::make_shared<TextEncoderImpl>(tc);
    auto report = load_module_weights(*te, *file_, tc.prefix, storage_, fp8_text_unet,
                                      te->ignorable_keys(), te->fused_layers(), device_);
    bytes_.text += report.bytes;
    text_.push_back(te);
  }
  load_unet();
  vae_ = std::make_shared<VaeImpl>(config_.vae);
  bytes_.vae = load_module_weights(*vae_, *file_, kVaePrefix, storage_, storage_.fp8_vae, {}, {}, device_).bytes;
  index_layers();
  log().info("{}: {} loaded, weights {} ({:.1f} MB: UNet {:.1f}, text {:.1f}, VAE {:.1f})",
             file_->path(), detection_.description(), weight_type_name(storage_.weights),
             bytes_.total() / 1e6, bytes_.denoiser / 1e6, bytes_.text / 1e6, bytes_.vae / 1e6);
  const bool own_fp8 = source_ && is_fp8(storage_.weights) && fp8_format(storage_.weights) == fp8_format(source_->weights);
  if (!source_warned_ && !own_fp8 && !source_note().empty()) {
    log().warn("{}", source_note());  // once per model: compare switches storage for every mode
    source_warned_ = true;
  }
}

std::string Model::source_note() const {
  if (!source_ || !is_fp8(source_->weights)) return "";
  const std::string own = weight_type_name(source_->weights);
  return file_->path() + " is stored in " + own + ": 16- and 32-bit storage hold its " + own +
         " values upcast (2 or 4 bytes a weight, the same values), so comparing storage types here shows "
         "their memory but not the fidelity FP8 costs; the real FP8 trade needs a 16-bit source checkpoint";
}

void Model::index_layers() {
  layers_.clear();
  layer_quantisable_.clear();
  auto add = [&](torch::nn::Module& root, const std::string& prefix, bool quantisable) {
    for (const auto& item : root.named_modules("", false)) {
      if (auto* layer = dynamic_cast<QuantisedLayer*>(item.value().get())) {
        const std::string key = prefix + item.key() + ".weight";
        layers_[key] = layer;
        layer_quantisable_[key] = quantisable && is_quantisable(key, layer->store.weight.sizes().vec(), true);
      }
    }
  };
  for (std::size_t i = 0; i < text_.size(); ++i) {
    const auto& prefix = config_.text_encoders[i].prefix;
    add(*text_[i], prefix, true);
    for (const auto& [name, layer] : text_[i]->fused_layers()) {
      layers_[prefix + name] = layer;
      layer_quantisable_[prefix + name] = is_quantisable(prefix + name, layer->store.weight.sizes().vec(), true);
    }
  }
  add(*unet_, kUNetPrefix, true);
  add(*vae_, kVaePrefix, storage_.fp8_vae);
}

std::size_t Model::set_loras(const std::vector<LoraRequest>& loras, LoraMode mode_in) {
  LoraMode mode = effective_lora_mode(mode_in, storage_);
  if (streaming_.plan.any() && !loras.empty()) {  // streamed blocks are read from the file each step: a merge would be lost
    if (mode == LoraMode::Merge || mode == LoraMode::MergeStochastic) {
      throw InputError("--lora-mode " + std::string(lora_mode_name(mode)) +
                       " cannot apply while the UNet streams (its weights are read from the file each step); "
                       "use --lora-mode online or auto, or a larger --weight-budget");
    }
    mode = LoraMode::Online;
  }
  if (loras == active_loras_ && mode == active_mode_) return 0;
  // Read and check every LoRA before touching a weight: a bad file leaves the previous set in place.
  std::vector<LoraFile> files;
  std::vector<LoraPlan> plans;
  files.reserve(loras.size());
  for (const auto& request : loras) {
    files.push_back(read_lora(request.path));
    plans.push_back(plan_lora(files.back(), config_));
  }
  // Undo the previous set: merged layers are read again from the file, online factors dropped.
  for (const auto& key : lora_touched_) {
    auto* layer = layers_.at(key);
    if (!clear_online_loras(*layer)) load_layer_weight(*layer, *file_, key, storage_, layer_quantisable_.at(key));
  }
  lora_touched_.clear();
  active_loras_.clear();
  active_mode_ = mode;
  // merge: each layer's LoRA factors gathered first, then one layer at a time gets its summed delta
  // (FP32, one layer's worth) and is stored again, so the merge never holds more than one layer's delta.
  std::map<std::string, std::vector<LoraFactor>> merged;
  for (std::size_t n = 0; n < loras.size(); ++n) {
    const auto& request = loras[n];
    for (const auto& [module, target] : plans[n].targets) {
      const std::string key = target.substr(0, target.find('#'));
      auto it = layers_.find(key);
      if (it == layers_.end()) continue;
      auto* layer = it->second;
      const bool unet = key.rfind(kUNetPrefix, 0) == 0;
      const auto factor = lora_factor_for(*module, target, layer->store.weight.size(0),
                                          unet ? request.unet_multiplier : request.te_multiplier);
      if (mode == LoraMode::Online) {
        add_online_lora(*layer, factor);
        if (std::find(lora_touched_.begin(), lora_touched_.end(), key) == lora_touched_.end()) lora_touched_.push_back(key);
      } else {
        merged[key].push_back(factor);
      }
    }
    active_loras_.push_back(request);
  }
  merge_lora_sets(merged, layers_, storage_, mode, lora_touched_);
  return lora_touched_.size();
}

void Model::set_fp8_compute(bool on) {
  for (auto& [key, layer] : layers_) {
    if (dynamic_cast<QLinearImpl*>(layer) != nullptr) layer->fp8_compute = on;
  }
}

void Model::set_storage(const StorageSpec& storage) {
  if (storage == storage_ && reload_error_.empty()) {
    return;
  }
  storage_ = storage;
  reload();
}

void Model::reload() {
  const auto loras = active_loras_;
  const auto mode = active_mode_;
  active_loras_.clear();
  lora_touched_.clear();
  // Release the old weights first, then read the new ones from the file (never from a copy).
  text_.clear();
  streaming_.clear();
  unet_.reset();
  vae_.reset();
  try {
    load_all();
  } catch (const std::exception& e) {
    text_.clear();
    streaming_.clear();
    unet_.reset();
    vae_.reset();
    layers_.clear();
    reload_error_ = e.what();
    throw;
  }
  reload_error_.clear();
  set_loras(loras, mode);
}

at::Tensor Model::encode_tokens(const at::Tensor& tokens, int clip_skip, ComputeType compute,
                                const TokenOverrides& overrides) const {
  const auto& te = text_.at(0);
  const auto& c = te->config();
  if (clip_skip < 1 || clip_skip > c.layers) {  // validate_request refuses it first
    throw std::invalid_argument("encode_tokens: clip skip " + std::to_string(clip_skip) + " outside 1.." +
                                std::to_string(c.layers));
  }
  const int layer = c.hidden_state_index - (clip_skip - 1);
  return te->forward(tokens.to(device_), layer, c.final_layer_norm, compute_dtype(compute, device_), overrides)
      .hidden.to(at::kCPU);
}

Model::SdxlText Model::encode_sdxl(const at::Tensor& tokens_l, const at::Tensor& tokens_g, ComputeType compute,
                                   const TokenOverrides& overrides_l, const TokenOverrides& overrides_g) const {
  if (!is_sdxl() || text_.size() < 2) throw InputError(file_->path() + ": not an SDXL checkpoint");
  const auto dtype = compute_dtype(compute, device_);
  const auto& cl = text_[0]->config();
  const auto& cg = text_[1]->config();
  SdxlText out;
  out.hidden_l = text_[0]->forward(tokens_l.to(device_), cl.hidden_state_index, cl.final_layer_norm, dtype, overrides_l)
                     .hidden.to(at::kCPU);
  auto g = text_[1]->forward(tokens_g.to(device_), cg.hidden_state_index, cg.final_layer_norm, dtype, overrides_g);
  out.hidden_g = g.hidden.to(at::kCPU);
  out.pooled = g.pooled.to(at::kCPU);
  out.context = at::cat({out.hidden_l, out.hidden_g}, -1);
  return out;
}

at::Tensor Model::sdxl_vector(const at::Tensor& pooled, const at::Tensor& size_cond) const {
  const int64_t b = size_cond.size(0);
  auto sizes = timestep_embedding(size_cond.to(at::kFloat).reshape({-1}), 256).reshape({b, -1});
  return at::cat({pooled.to(at::kFloat), sizes}, 1);
}

at::Tensor Model::unet(const at::Tensor& x, const at::Tensor& t, const at::Tensor& context,
                       const at::Tensor& y, ComputeType compute,
                       const std::atomic<bool>* cancel, const UNetControl* control) const {
  // Inputs already on the device (sample() moves the conditioning once) are not copied again.
  auto eps = unet_->forward(x.to(device_), t.to(device_), context.to(device_), y.defined() ? y.to(device_) : y,
                            compute_dtype(compute, device_), cancel, control);
  return eps.to(at::kCPU);
}


at::Tensor Model::vae_decode(const at::Tensor& latent, ComputeType compute) const {
  return vae_->decode(latent.to(device_), compute_dtype(compute, device_)).to(at::kCPU);
}

at::Tensor Model::vae_encode(const at::Tensor& image, ComputeType compute) const {
  return vae_->encode(image.to(device_), compute_dtype(compute, device_)).to(at::kCPU);
}

at::Tensor Model::vae_moments(const at::Tensor& image, ComputeType compute) const {
  vae_encoded_ += image.size(0);
  return vae_->encode_moments(image.to(device_), compute_dtype(compute, device_)).to(at::kCPU);
}

void set_img2img_steps(SamplingInit& init, int steps, float strength, bool fixed_steps) {
  const double s = std::min(static_cast<double>(strength), 0.999);
  if (fixed_steps) {
    // validate_request refused schedules longer than the model's timesteps
    init.schedule_steps = static_cast<int>(std::min<double>(hires_schedule_length(steps, strength), kTrainingTimesteps));
    init.t_enc = steps - 1;
  } else {
    init.schedule_steps = steps;
    init.t_enc = static_cast<int>(s * steps);
  }
  init.t_enc = std::clamp(init.t_enc, 0, init.schedule_steps - 1);
}

PassDenoiser Model::denoiser(const at::Tensor& cond, const at::Tensor& uncond, float cfg_scale, ComputeType compute,
                             const at::Tensor& y_cond, const at::Tensor& y_uncond, const at::Tensor& image_cond_in,
                             const std::function<void(double)>& on_model_ms, const std::atomic<bool>* cancel,
                             const std::shared_ptr<PassControl>& control) const {
  const bool use_cfg = cfg_scale != 1.0f;
  // Text conditioning stays the same every step: build the batched [uncond; cond] once.
  const at::Tensor ctx = (use_cfg ? at::cat({uncond, cond}) : cond).to(device_);
  if (is_sdxl() && (!y_cond.defined() || (use_cfg && !y_uncond.defined()))) {
    throw std::invalid_argument("SDXL sampling needs the vector conditioning (y_cond and y_uncond)");
  }
  const at::Tensor y = !is_sdxl() ? at::Tensor() : (use_cfg ? at::cat({y_uncond, y_cond}) : y_cond).to(device_);
  if (is_inpainting() && !image_cond_in.defined()) throw std::invalid_argument("an inpainting UNet needs image_cond");
  // a 9-channel UNet's extra inputs, on the device and doubled for CFG once, like the context
  const at::Tensor image_cond = !image_cond_in.defined() ? at::Tensor()
                                : (use_cfg ? image_cond_in.repeat({2, 1, 1, 1}) : image_cond_in).to(device_);
  auto cfg = std::make_shared<CfgDenoiser>([this, ctx, y, image_cond, compute, cancel, on_model_ms, control,
                                            use_cfg](const at::Tensor& x_in, const at::Tensor& t) {
    const auto start = std::chrono::steady_clock::now();
    const at::Tensor input = image_cond.defined() ? at::cat({x_in, image_cond}, 1) : x_in;
    // the ControlNets see what the UNet sees (its latent channels): x·c_in, t, each row's context
    const auto residuals = control ? control->residuals(x_in.to(device_), t.to(device_), ctx, y, use_cfg,
                                                        compute_dtype(compute, device_))
                                   : std::nullopt;
    auto eps = unet(input, t, ctx, y, compute, cancel, residuals ? &*residuals : nullptr);
    if (on_model_ms) {
      on_model_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return eps;
  }, cfg_scale);
  PassDenoiser d;
  const Denoiser denoise = cfg->denoiser(schedule_);
  d.denoise = [cfg, denoise](const at::Tensor& x, const at::Tensor& sigma) { return denoise(x, sigma); };
  const EpsModel eps = cfg->eps_model();
  d.eps = [cfg, eps](const at::Tensor& x, int64_t t) { return eps(x, t); };
  d.alphas_cumprod = schedule_.alphas_cumprod();
  if (control) d.step_done = [control](int step, int steps) { control->step_done(step, steps); };
  return d;
}

at::Tensor Model::sample(const at::Tensor& noise, const at::Tensor& cond, const at::Tensor& uncond,
                         const SamplingParams& p, ComputeType compute,
                         const StepCallback& callback, const std::atomic<bool>* cancel,
                         const std::function<void(double)>& on_model_ms, const at::Tensor& y_cond,
                         const at::Tensor& y_uncond, const std::shared_ptr<PassControl>& control) const {
  if (p.steps < 1) throw std::invalid_argument("Model::sample: steps < 1");  // validate_request refuses it first
  const PassDenoiser d = denoiser(cond, uncond, p.cfg, compute, y_cond, y_uncond, p.init.image_cond, on_model_ms, cancel, control);
  const int schedule_steps = p.init.latent.defined() ? p.init.schedule_steps : p.steps;
  return sample_pass(d, Prediction::Eps, p.sampler, noise, schedule_.get_sigmas(p.schedule, schedule_steps), p.init, p.seed,
                     callback);
}

}  // namespace fp8s
