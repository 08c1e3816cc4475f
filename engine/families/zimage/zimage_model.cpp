// The Z-Image family's model (../shared/reference/zimage/README.md, "generate"): the prompt in
// Qwen's chat template, Qwen3's hidden_states[-2] of its tokens (at most --qwen-max-length), the
// transformer as a denoiser over the flow with CFG on the usual scale (diffusers' normalisation and
// truncation), the shifted schedule, and the Flux.1 autoencoder.
#include "families/zimage/zimage_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <array>
#include <cmath>
#include <sstream>

#include "core/compute_choice.h"
#include "core/error.h"
#include "core/logging.h"
#include "families/component_set.h"
#include "families/flux/flux_family.h"
#include "pipeline/family_options.h"
#include "models/lm/decoder_lm.h"
#include "families/zimage/zimage_files.h"
#include "families/zimage/zimage_lora_keys.h"
#include "families/zimage/zimage_sampling.h"
#include "families/zimage/zimage_transformer.h"
#include "io/image_ops.h"
#include "models/vae.h"
#include "pipeline/engine.h"
#include "pipeline/infotext.h"
#include "pipeline/run_support.h"
#include "text/prompt_parser.h"
#include "text/qwen_tokenizer.h"

namespace fp8s {
namespace {

constexpr int kDefaultTextLength = 512;
constexpr double kDefaultShift = 3.0;  // Turbo's, where --shift is 0

struct ZImageConditioning : FamilyConditioning {
  at::Tensor cond, uncond;  // caption features [1, L, D], FP32 on the CPU
};

PartSpec transformer_part(const ComponentSource& source, uint64_t block) {
  return {"transformer", "the Z-Image transformer", source, source.path + ": no Z-Image transformer", ZImageTransformerImpl::ignorable_keys(),
          [](const SafetensorsFile& file, const std::string& p) { return std::make_shared<ZImageTransformerImpl>(zimage_config(file, p)); },
          block};
}

// The three parts as the component set loads them.
std::array<PartSpec, 3> zimage_parts(const ZImageFiles& f, const ZImageConfig& config, const DecoderLmConfig& text) {
  const uint64_t d = static_cast<uint64_t>(config.dim);
  const uint64_t block = d * (4 * d + 3 * static_cast<uint64_t>(config.ffn) + 4 * static_cast<uint64_t>(config.adaln));
  return {transformer_part(f.transformer, block),
          PartSpec{"Qwen3 text encoder", "the Qwen3 text encoder", f.text_encoder,
                   f.transformer.path + ": no Qwen3 text encoder; pass --text-encoder qwen_3_4b.safetensors",
                   DecoderLmImpl::ignorable_keys(text),
                   [](const SafetensorsFile& file, const std::string& p) {
                     return std::make_shared<DecoderLmImpl>(decoder_lm_config(file, p, {}, "qwen3.config"));
                   },
                   text.layer_weights()},
          PartSpec{"autoencoder", "the Flux autoencoder", f.vae, f.transformer.path + ": no Flux autoencoder; pass --vae ae.safetensors", {},
                   [](const SafetensorsFile& file, const std::string& p) { return std::make_shared<VaeImpl>(flux_ae_config(file, p)); },
                   0}};
}

ZImageConfig transformer_config(const ZImageFiles& f) {
  if (!f.transformer.found()) throw InputError("no Z-Image transformer");
  return zimage_config(SafetensorsFile(f.transformer.path), f.transformer.prefix);
}

DecoderLmConfig text_config(const ZImageFiles& f, const ZImageConfig& config) {
  if (!f.text_encoder.found()) throw InputError(f.transformer.path + ": no Qwen3 text encoder; pass --text-encoder qwen_3_4b.safetensors");
  const SafetensorsFile te(f.text_encoder.path);
  auto c = decoder_lm_config(te, f.text_encoder.prefix, {}, "qwen3.config");
  if (c.hidden != config.cap_dim) {
    throw InputError(te.path() + ": a text encoder " + std::to_string(c.hidden) + " wide, but the transformer reads captions " +
                     std::to_string(config.cap_dim) + " wide (Z-Image Turbo uses Qwen3-4B: qwen_3_4b.safetensors)");
  }
  return c;
}

class ZImageFamily final : public ComponentSet {
 public:
  ZImageFamily(const LoadOptions& o, const at::Device& device, const ZImageFiles& files, const ZImageConfig& config)
      : ComponentSet(zimage_parts(files, config, text_config(files, config)), o.storage, device), config_(config) {
    tokenizer_ = std::make_shared<const QwenTokenizer>(QwenTokenizer::find(component_file(o, "qwen_tokenizer"), o.checkpoint));
    vae_factor_ = 1 << (static_cast<int>(flux_ae_config(SafetensorsFile(files.vae.path), files.vae.prefix).ch_mult.size()) - 1);
    traits_ = zimage_traits(config_.dim, vae_factor_);
    check_at_open();
  }

  const FamilyTraits& traits() const override { return traits_; }

  std::shared_ptr<FamilyConditioning> encode(const GenerationRequest& r, const std::string& prompt,
                                             const std::string& negative) override {
    const at::ScalarType compute = compute_dtype(r.compute, device());
    const int given = static_cast<int>(option_number(traits_.options, r.options, "qwen-max-length"));
    const int limit = given > 0 ? given : kDefaultTextLength;
    auto c = std::make_shared<ZImageConditioning>();
    c->cond = encode_text(prompt, limit, compute);
    if (r.cfg > 1.0f) c->uncond = encode_text(negative, limit, compute);
    text_done();
    return c;
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
    return zimage_denoiser(transformer(), c.cond, c.uncond, s, compute_dtype(r.compute, device()), device(), on_model_ms);
  }

  at::Tensor encode_images(const at::Tensor& images, ComputeType compute, at::Generator&) override {
    return vae().encode(images.to(device()), compute_dtype(compute, device())).to(at::kCPU, at::kFloat);
  }
  at::Tensor decode(const at::Tensor& latent, ComputeType compute) override {
    return vae().decode(latent.to(device()), compute_dtype(compute, device()));
  }

  std::string infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                       const std::string& model_hash) const override {
    return flow_infotext(r, seed, model_name, model_hash);
  }

  // One transformer call at t = 0.5 on a random latent_size² latent and 32 random caption features.
  std::vector<float> probe(const StorageSpec& storage, ComputeType compute, uint64_t seed, int latent_size,
                           const std::vector<LoraRequest>& loras, LoraMode mode) override {
    use_for_probe(storage, loras, mode);
    const int64_t side = std::max<int64_t>(2, latent_size / 2 * 2);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto x = at::randn({1, 16, side, side}, gen, at::kFloat);
    const auto cap = at::randn({1, 32, config_.cap_dim}, gen, at::kFloat);
    auto out = transformer().forward(x.to(device()), at::full({1}, 0.5f), cap.to(device()), {32}, compute_dtype(compute, device()))
                   .to(at::kCPU, at::kFloat)
                   .contiguous();
    return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  }

 protected:
  uint64_t working_bytes(int w, int h, int batch, ComputeType compute) const override {
    return flux_working_bytes(w, h, batch, compute, 3840);
  }
  // zimage_lora_keys.h names; the unet multiplier
  DenoiserLoraLayout lora_layout() const override { return plan_zimage_lora_layout; }

 private:
  ZImageTransformerImpl& transformer() { return part_as<ZImageTransformerImpl>(Part::Denoiser); }
  VaeImpl& vae() { return part_as<VaeImpl>(Part::Vae); }

  at::Tensor encode_text(const std::string& prompt, int limit, at::ScalarType compute) {
    auto ids = tokenizer_->encode(QwenTokenizer::chat_template(plain_prompt(prompt)));
    if (static_cast<int>(ids.size()) > limit) ids.resize(static_cast<std::size_t>(limit));  // diffusers cuts the tail
    const auto tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).unsqueeze(0);
    return part_as<DecoderLmImpl>(Part::Text).forward(tokens, at::Tensor(), compute).to(at::kCPU, at::kFloat);
  }

  ZImageConfig config_;
  std::shared_ptr<const QwenTokenizer> tokenizer_;
  int vae_factor_ = 8;
  FamilyTraits traits_;
};

}  // namespace

FamilyTraits zimage_traits(int dim, int vae_factor) {
  FamilyTraits t = transformer_traits("zimage-turbo", "Z-Image Turbo", 2 * vae_factor, "Qwen3 encode");
  t.native_size = dim < 3840 ? 8 * t.size_multiple : 1024;  // the tiny reference transformers are narrow and small
  t.size_presets = {{1024, 1024}, {1152, 896}, {896, 1152}, {1216, 832}, {832, 1216}, {1344, 768}, {768, 1344}, {512, 512}};
  t.default_steps = 8;  // Turbo is distilled: no CFG pass (CFG 1)
  t.components = zimage_roles();
  t.options = zimage_options();
  t.latent = flux_latent_format(vae_factor);
  t.compare_modes = "fp16,fp8-e4m3";
  return t;
}

StorageSpec zimage_auto_storage(const SafetensorsFile& file) {
  const auto c = zimage_contents(file);
  return c.transformer ? released_storage(file, *c.transformer + "layers.0.attention.qkv.weight") : StorageSpec{WeightType::BF16};
}

ZImageFiles zimage_files(const LoadOptions& o) {
  return resolve_zimage_files(o.checkpoint, component_file(o, "text_encoder"), component_file(o, "vae"));
}

std::unique_ptr<FamilyModel> open_zimage(const LoadOptions& options, const at::Device& device) {
  const auto files = zimage_files(options);
  return std::make_unique<ZImageFamily>(options, device, files, transformer_config(files));
}

WeightBytes zimage_estimate(const LoadOptions& options, const StorageSpec& storage) {
  const auto f = zimage_files(options);
  return parts_estimate(f.transformer, f.text_encoder, f.vae, storage);
}

ResidencyPlan zimage_plan(const LoadOptions& options, const StorageSpec& storage, uint64_t budget) {
  // the transformer only: its components need not be found
  const auto prefix = zimage_contents(SafetensorsFile(options.checkpoint)).transformer;
  if (!prefix) throw InputError(options.checkpoint + ": no Z-Image transformer to plan");
  return denoiser_plan(transformer_part({options.checkpoint, *prefix}, 0), storage, budget);
}

}  // namespace fp8s
