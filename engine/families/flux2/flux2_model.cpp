// FLUX.2 generation (families/flux2/flux2_model.h).
#include "families/flux2/flux2_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <array>
#include <cstdlib>

#include "core/compute_choice.h"
#include "core/error.h"
#include "core/logging.h"
#include "families/component_set.h"
#include "families/flux/flux_family.h"
#include "families/flux/flux_model.h"
#include "families/flux2/flux2_ae.h"
#include "families/flux2/flux2_lora_keys.h"
#include "families/flux2/flux2_sampling.h"
#include "io/image_ops.h"
#include "io/png.h"
#include "models/component_files.h"
#include "models/flux2/flux2.h"
#include "models/lm/decoder_lm.h"
#include "pipeline/family_options.h"
#include "pipeline/img2img.h"
#include "pipeline/run_support.h"
#include "text/prompt_parser.h"
#include "text/qwen_tokenizer.h"
#include "text/tekken_tokenizer.h"
#include "models/lm/tekken_file.h"

namespace fp8s {
namespace {

constexpr int kTextLength = 512;        // klein's: the template truncated and right-padded to exactly 512
constexpr int32_t kQwenPad = 151643;    // <|endoftext|>

// A component's file: the explicit flag, else found by its role's hints in a ComfyUI models/ tree
// around the model or beside it (models/component_files.h), else an error naming the flag.
std::string component_path(const LoadOptions& o, const char* role, const char* flag, const char* example,
                           const std::vector<std::string>& subdirs, const std::function<bool(const SafetensorsFile&)>& accepts) {
  const std::string given = component_file(o, role);
  if (!given.empty()) return given;
  std::vector<std::string> hints, searched;
  for (const auto& r : flux2_roles()) {
    if (r.role == role) hints = r.file_hints;
  }
  const std::string found = find_component_file(o.checkpoint, hints, subdirs, accepts, searched, role);  // diffusers: text_encoder/, vae/
  if (!found.empty()) return found;
  std::string where;
  for (const auto& s : searched) where += (where.empty() ? "" : ", ") + s;
  throw InputError(o.checkpoint + ": FLUX.2 needs its " + std::string(role) + " (looked in " + where + "); pass " + flag + " " +
                   example);
}

// The text encoder whose width the transformer reads (3 x hidden = context), and the FLUX.2 autoencoder.
std::string text_encoder_path(const LoadOptions& o, const Flux2Config& config) {
  const int64_t context = config.context_in_dim;
  return component_path(o, "text_encoder", "--text-encoder",
                        config.guidance_embed ? "mistral_3_small_flux2_fp8.safetensors" : "qwen_3_4b.safetensors",
                        {"text_encoders", "clip"}, [context](const SafetensorsFile& f) {
                          const auto* embed = f.find("model.embed_tokens.weight");
                          return embed && embed->shape.size() == 2 && 3 * embed->shape[1] == context;
                        });
}

std::string autoencoder_path(const LoadOptions& o) {
  return component_path(o, "vae", "--vae", "flux2-vae.safetensors", {"vae"}, [](const SafetensorsFile& f) {
    return f.find("bn.running_mean") && f.find("decoder.post_quant_conv.weight");
  });
}


struct Flux2Conditioning : FamilyConditioning {
  at::Tensor cond, uncond;  // [1, 512, context], FP32 on the CPU
};

// A reference image as BFL prepares it: at least 64 px a side and an aspect of at most 8, at most
// 1024² pixels (Lanczos to that area), center-cropped to multiples of `multiple` pixels.
RgbImage reference_image(const std::string& path, int multiple) {
  RgbImage im = read_png(path).image;
  if (im.width < 64 || im.height < 64) {
    throw InputError(path + ": a reference image must be at least 64x64 pixels (it is " + std::to_string(im.width) + "x" +
                     std::to_string(im.height) + ")");
  }
  if (im.width > 8 * im.height || im.height > 8 * im.width) throw InputError(path + ": a reference image's aspect may be at most 8:1");
  const double area = static_cast<double>(im.width) * im.height, limit = 1024.0 * 1024.0;
  if (area > limit) {
    const double s = std::sqrt(limit / area);
    im = resize_rgb(im, static_cast<int>(im.width * s), static_cast<int>(im.height * s));
  }
  const int w = im.width / multiple * multiple, h = im.height / multiple * multiple;
  const int left = (im.width - w) / 2, top = (im.height - h) / 2;
  return crop(im, Rect{left, top, left + w, top + h});
}

// What a load opens: the transformer's configuration, its text encoder's, and the three parts.
struct Flux2Setup {
  std::string prefix;
  Flux2Config config;
  DecoderLmConfig text;
  std::array<PartSpec, 3> parts;
};

PartSpec transformer_part(const ComponentSource& source, const Flux2Config& config) {
  const auto h = static_cast<uint64_t>(config.hidden_size), m = static_cast<uint64_t>(config.mlp_hidden());
  return {"transformer", "the FLUX.2 transformer", source, source.path + ": no FLUX.2 transformer", {},
          [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<Flux2Impl>(flux2_config(f, p)); },
          2 * (4 * h * h + 3 * h * m)};  // a double block: two streams of qkv, proj and the SwiGLU MLP
}

Flux2Setup flux2_setup(const LoadOptions& o) {
  Flux2Setup s;
  const SafetensorsFile file(o.checkpoint);
  s.prefix = flux2_prefix(file).value_or("");  // the registry opens files it detected as FLUX.2
  s.config = flux2_config(file, s.prefix);
  const bool dev = s.config.guidance_embed;
  const SafetensorsFile te(text_encoder_path(o, s.config));
  s.text = flux2_text_config(te, dev);
  if (3 * s.text.hidden != s.config.context_in_dim) {
    throw InputError(te.path() + ": a text encoder " + std::to_string(s.text.hidden) + " wide, but the transformer reads " +
                     std::to_string(s.config.context_in_dim) + " = 3 x " + std::to_string(s.config.context_in_dim / 3) +
                     (dev ? " (dev: Mistral Small 3.2)" : " (klein 4B: Qwen3-4B, qwen_3_4b.safetensors; 9B: Qwen3-8B)"));
  }
  const auto text = s.text;
  const char* te_name = dev ? "Mistral text encoder" : "Qwen3 text encoder";
  s.parts = {transformer_part({o.checkpoint, s.prefix}, s.config),
             PartSpec{te_name, std::string("the ") + te_name, {te.path(), "model."}, te.path() + ": no text encoder",
                      DecoderLmImpl::ignorable_keys(text),
                      [text](const SafetensorsFile&, const std::string&) { return std::make_shared<DecoderLmImpl>(text); },
                      text.layer_weights()},
             PartSpec{"autoencoder", "the FLUX.2 autoencoder", {autoencoder_path(o), ""}, o.checkpoint + ": no FLUX.2 autoencoder",
                      Flux2AutoencoderImpl::ignorable_keys(),
                      [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<Flux2AutoencoderImpl>(f, p); }, 0}};
  return s;
}

class Flux2Family final : public ComponentSet {
 public:
  Flux2Family(const LoadOptions& o, const at::Device& device, Flux2Setup setup)
      : ComponentSet(std::move(setup.parts), o.storage, device), config_(setup.config), dev_(setup.config.guidance_embed) {
    if (dev_) {
      // Tekken: --mistral-tokenizer, else FP8S_MISTRAL_TOKENIZER, else the text encoder's own tekken_model
      std::string path = component_file(o, "mistral_tokenizer");
      if (path.empty() && std::getenv("FP8S_MISTRAL_TOKENIZER")) path = std::getenv("FP8S_MISTRAL_TOKENIZER");
      tekken_ = std::make_shared<const TekkenTokenizer>(load_tekken(path.empty() ? spec(Part::Text).source.path : path));
    } else {
      // the tokenizer as Z-Image finds it: --qwen-tokenizer, else beside the model, FP8S_QWEN_TOKENIZER, the data folders
      qwen_ = std::make_shared<const QwenTokenizer>(QwenTokenizer::find(component_file(o, "qwen_tokenizer"), o.checkpoint));
    }
    const SafetensorsFile ae(spec(Part::Vae).source.path);
    const int factor = 1 << (static_cast<int>(flux_ae_config(ae, "").ch_mult.size()) - 1);
    traits_ = flux2_model_traits(SafetensorsFile(o.checkpoint), setup.prefix, factor);
    check_at_open();
  }

  const FamilyTraits& traits() const override { return traits_; }

  std::shared_ptr<FamilyConditioning> encode(const GenerationRequest& r, const std::string& prompt,
                                             const std::string& negative) override {
    const auto compute = compute_dtype(r.compute, device());
    auto c = std::make_shared<Flux2Conditioning>();
    c->cond = encode_text(prompt, compute);
    if (r.cfg > 1.0f) c->uncond = encode_text(negative, compute);  // klein base's true CFG
    text_done();
    return c;
  }

  at::Tensor sigmas(const GenerationRequest&, int steps, int64_t latent_h, int64_t latent_w) const override {
    return at::tensor(flux2_sigmas(steps, latent_h * latent_w), at::kFloat);
  }

  PassDenoiser denoiser(const FamilyConditioning& cond, const GenerationRequest& r, const SamplingInit& init,
                        const std::function<void(double)>& on_model_ms, const std::atomic<bool>*) override {
    const auto& c = static_cast<const Flux2Conditioning&>(cond);
    Flux2Guidance g;
    g.cfg = r.cfg;
    if (dev_) g.distilled = static_cast<float>(option_number(traits_.options, r.options, "guidance"));
    auto refs = refs_;
    if (init.latent.defined()) refs.push_back(init.latent.narrow(0, 0, 1));  // img2img: the init is a reference too
    return flux2_denoiser(part_as<Flux2Impl>(Part::Denoiser), c.cond, c.uncond, g, refs, compute_dtype(r.compute, device()),
                          on_model_ms);
  }

  at::Tensor encode_images(const at::Tensor& images, ComputeType compute, at::Generator&) override {
    return ae().encode_model(images.to(device()), compute_dtype(compute, device()));
  }

  // One transformer call at t = 0.5 (dev: guidance 4) on a random latent_size² grid of 128 channels
  // and 32 random text rows of the transformer's context width.
  std::vector<float> probe(const StorageSpec& storage, ComputeType compute, uint64_t seed, int latent_size,
                           const std::vector<LoraRequest>& loras, LoraMode mode) override {
    use_for_probe(storage, loras, mode);
    const int64_t side = std::max<int64_t>(1, latent_size);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto x = at::randn({1, side * side, config_.in_channels}, gen, at::kFloat);
    const auto txt = at::randn({1, 32, config_.context_in_dim}, gen, at::kFloat);
    const auto guidance = dev_ ? at::full({1}, 4.0f) : at::Tensor();
    auto out = part_as<Flux2Impl>(Part::Denoiser)
                   .forward(x.to(device()), flux2_grid_ids(side, side, 0), txt.to(device()), flux2_text_ids(32), at::full({1}, 0.5f),
                            guidance, compute_dtype(compute, device()))
                   .to(at::kCPU, at::kFloat)
                   .contiguous();
    return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  }
  at::Tensor decode(const at::Tensor& latent, ComputeType compute) override {
    return ae().decode_model(latent, compute_dtype(compute, device()), device());
  }

 protected:
  uint64_t working_bytes(int w, int h, int batch, ComputeType compute) const override {
    return flux_working_bytes(w, h, batch, compute, config_.hidden_size);
  }

  // flux2_lora_keys.h names; the unet multiplier
  DenoiserLoraLayout lora_layout() const override { return plan_flux2_lora_layout; }

  // An edit's reference images, encoded once a request (the autoencoder loads for them).
  void prepare_request(const GenerationRequest& r) override {
    refs_.clear();
    const std::string refs = option_text(traits_.options, r.options, "ref-image");
    if (refs.empty()) return;
    const int multiple = traits_.size_multiple;  // one token: 16 pixels released, 4 tiny
    const auto compute = compute_dtype(r.compute, device());
    std::size_t from = 0;
    while (from <= refs.size()) {  // several images: PATH;PATH
      const std::size_t to = std::min(refs.find(';', from), refs.size());
      const auto im = reference_image(refs.substr(from, to - from), multiple);
      refs_.push_back(ae().encode_model(image_tensor(im).to(device()), compute));
      from = to + 1;
    }
  }

 private:
  Flux2AutoencoderImpl& ae() { return part_as<Flux2AutoencoderImpl>(Part::Vae); }

  // the template, truncated to 512 and padded to exactly 512; all 512 rows go on
  at::Tensor encode_text(const std::string& prompt, at::ScalarType compute) {
    // dev: Mistral's template, left-padded with <pad>; klein: Qwen's, right-padded with <|endoftext|>
    auto ids = dev_ ? tekken_->instruct_prompt(plain_prompt(prompt)) : qwen_->encode(QwenTokenizer::chat_template(plain_prompt(prompt), true));
    if (ids.size() > static_cast<std::size_t>(kTextLength)) ids.resize(kTextLength);
    std::vector<int64_t> tokens(kTextLength, dev_ ? TekkenTokenizer::kPad : kQwenPad), mask(kTextLength, 0);
    const std::size_t first = dev_ ? kTextLength - ids.size() : 0;
    for (std::size_t i = 0; i < ids.size(); ++i) tokens[first + i] = ids[i], mask[first + i] = 1;
    return part_as<DecoderLmImpl>(Part::Text)
        .forward(at::tensor(tokens, at::kLong).unsqueeze(0), at::tensor(mask, at::kLong).unsqueeze(0), compute)
        .to(at::kCPU, at::kFloat);
  }

  Flux2Config config_;
  bool dev_ = false;
  FamilyTraits traits_;
  std::shared_ptr<const QwenTokenizer> qwen_;     // klein
  std::shared_ptr<const TekkenTokenizer> tekken_;  // dev
  std::vector<at::Tensor> refs_;  // this request's reference latents (model space)
};

}  // namespace

std::vector<FamilyOption> flux2_options(bool dev) {
  using T = FamilyOption::Type;
  std::vector<FamilyOption> out;
  if (dev) {
    out.push_back({"guidance", "Guidance", "Guidance", T::Number, 0, 100, "4", {},
                   "FLUX.2 [dev]: the distilled guidance the transformer is given", true, false, true, {}});
  }
  out.push_back({"ref-image", "Reference", "Reference image", T::Files, 0, 4, "", {},
                 "FLUX.2: a reference image to edit from (PNG, at least 64x64; up to 4)", true, false, false, {}});
  return out;
}

std::vector<ComponentRole> flux2_roles() {
  return {{"text_encoder", "text encoder", {"qwen_3_4b", "qwen_3_8b", "qwen3", "mistral_3_small_flux2", "mistral"}, "text-encoder",
           "FLUX.2 klein: qwen_3_4b.safetensors, dev: mistral_3_small_flux2_*.safetensors"},
          {"vae", "autoencoder", {"flux2-vae", "flux2_vae", "ae"}, "vae", "FLUX.2: flux2-vae.safetensors"},
          {"qwen_tokenizer", "Qwen tokenizer", {"tokenizer"}, "qwen-tokenizer", "Qwen's tokenizer.json or its folder", true},
          {"mistral_tokenizer", "Mistral tokenizer", {"tekken"}, "mistral-tokenizer",
           "FLUX.2 dev: tekken.json(.gz) (default: the text encoder's own tekken_model)", true}};
}

DecoderLmConfig flux2_text_config(const SafetensorsFile& file, bool mistral) {
  DecoderLmConfig base;
  base.outputs = {9, 18, 27};
  if (!mistral) return decoder_lm_config(file, "model.", base, "qwen3.config");
  base.name = "Mistral";
  base.eps = 1e-5;
  base.rope_theta = 1e9;
  base.head_dim = 128;  // 32 heads of 128 read a 5120-wide stream (no q/k norm tells it)
  base.outputs = {10, 20, 30};
  return decoder_lm_config(file, "model.", base, "mistral3.config");
}

FamilyTraits flux2_model_traits(const SafetensorsFile& file, const std::string& prefix, int ae_factor) {
  const bool dev = file.find(prefix + "guidance_in.in_layer.weight") != nullptr;
  const auto* img_in = file.find(prefix + "img_in.weight");
  const bool tiny = img_in && !img_in->shape.empty() && img_in->shape[0] < 3072;
  const auto* txt_in = file.find(prefix + "txt_in.weight");
  const int64_t context = txt_in && txt_in->shape.size() == 2 ? txt_in->shape[1] : 0;
  const char* name = dev ? "FLUX.2 [dev]" : context == 12288 ? "FLUX.2 [klein] 9B" : context == 7680 ? "FLUX.2 [klein] 4B" : "FLUX.2 [klein]";
  // one token: 2x2 latent pixels
  FamilyTraits t = transformer_traits(dev ? "flux2-dev" : "flux2-klein", name, 2 * ae_factor,
                                      dev ? "Mistral encode" : "Qwen3 encode");
  t.native_size = tiny ? 8 * t.size_multiple : 1024;
  t.size_presets = {{1024, 1024}, {1216, 832}, {832, 1216}, {768, 768}, {512, 512}};
  t.samplers = {Sampler::Euler};
  t.default_steps = dev ? 50 : 4;  // CFG 1: klein distilled; klein base runs true CFG above 1
  t.components = flux2_roles();
  t.options = flux2_options(dev);
  t.latent.channels = 128;  // the autoencoder's 32 channels patchified 2x2 and normalised
  t.latent.factor = 2 * ae_factor;
  t.compare_modes = "fp16,fp8-e4m3";
  return t;
}

std::optional<std::string> flux2_prefix(const SafetensorsFile& file) {
  for (const char* p : {"", "model.diffusion_model."}) {
    if (file.find(std::string(p) + "double_stream_modulation_img.lin.weight")) return std::string(p);
  }
  return std::nullopt;
}

WeightBytes flux2_estimate(const LoadOptions& o, const StorageSpec& storage) {
  const auto setup = flux2_setup(o);
  return parts_estimate(setup.parts[0].source, setup.parts[1].source, setup.parts[2].source, storage);
}

ResidencyPlan flux2_plan(const LoadOptions& o, const StorageSpec& storage, uint64_t budget) {
  const SafetensorsFile file(o.checkpoint);  // the transformer only: its components need not be found
  const auto prefix = flux2_prefix(file);
  if (!prefix) throw InputError(o.checkpoint + ": no FLUX.2 transformer to plan");
  return denoiser_plan(transformer_part({o.checkpoint, *prefix}, flux2_config(file, *prefix)), storage, budget);
}

std::unique_ptr<FamilyModel> open_flux2(const LoadOptions& options, const at::Device& device) {
  return std::make_unique<Flux2Family>(options, device, flux2_setup(options));
}

}  // namespace fp8s
