// Qwen-Image generation (families/qwenimage/qwenimage_model.h).
#include "families/qwenimage/qwenimage_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <array>
#include <sstream>

#include "core/compute_choice.h"
#include "core/error.h"
#include "families/component_set.h"
#include "families/flux/flux_family.h"
#include "families/qwenimage/qwenimage_lora_keys.h"
#include "families/qwenimage/qwenimage_sampling.h"
#include "families/qwenimage/qwenimage_text.h"
#include "families/qwenimage/qwenimage_transformer.h"
#include "families/qwenimage/qwenimage_vae.h"
#include "models/component_files.h"
#include "models/lm/decoder_lm.h"
#include "pipeline/family_options.h"
#include "pipeline/infotext.h"
#include "pipeline/run_support.h"
#include "text/prompt_parser.h"
#include "text/qwen_tokenizer.h"

namespace fp8s {
namespace {

constexpr int kDefaultRows = 512;                          // the pipeline's max_sequence_length
constexpr int kTokenLimit = 1024 + kQwenImageTemplateDrop;  // the tokenizer's truncation

struct QwenImageConditioning : FamilyConditioning {
  at::Tensor cond, uncond;  // prompt embeddings [1, L, D], FP32 on the CPU (uncond: true CFG only)
};

// A component's file: the explicit flag, else found by its role's hints (a diffusers folder's
// subfolder, a ComfyUI models/ tree around the model, beside it), else an error naming the flag.
std::string component_path(const LoadOptions& o, const char* role, const char* flag, const char* example,
                           const std::vector<std::string>& subdirs, const std::function<bool(const SafetensorsFile&)>& accepts) {
  const std::string given = component_file(o, role);
  if (!given.empty()) return given;
  std::vector<std::string> hints, searched;
  for (const auto& r : qwenimage_roles()) {
    if (r.role == role) hints = r.file_hints;
  }
  const std::string found = find_component_file(o.checkpoint, hints, subdirs, accepts, searched, role);
  if (!found.empty()) return found;
  std::string where;
  for (const auto& s : searched) where += (where.empty() ? "" : ", ") + s;
  throw InputError(o.checkpoint + ": Qwen-Image needs its " + std::string(role) + " (looked in " + where + "); pass " + flag + " " +
                   example);
}

PartSpec transformer_part(const ComponentSource& source, const QwenImageConfig& c) {
  const auto d = static_cast<uint64_t>(c.dim), m = static_cast<uint64_t>(c.mlp);
  return {"transformer", "the Qwen-Image transformer", source, source.path + ": no Qwen-Image transformer",
          QwenImageTransformerImpl::ignorable_keys(),
          [](const SafetensorsFile& f, const std::string& p) { return std::make_shared<QwenImageTransformerImpl>(qwenimage_config(f, p)); },
          2 * (6 * d * d + 4 * d * d + 2 * d * m)};  // a block: two streams of modulation, q/k/v/out and the MLP
}

// What a load opens: the transformer's configuration and the three parts.
struct QwenImageSetup {
  std::string prefix;
  QwenImageConfig config;
  std::array<PartSpec, 3> parts;
};

QwenImageSetup qwenimage_setup(const LoadOptions& o) {
  QwenImageSetup s;
  const SafetensorsFile file(o.checkpoint);
  s.prefix = qwenimage_prefix(file).value_or("");
  s.config = qwenimage_config(file, s.prefix);
  if (s.config.zero_cond_t) {
    throw InputError(o.checkpoint + ": Qwen-Image-Edit-2511 (its __index_timestep_zero__ marker) edits from an input image through "
                     "Qwen2.5-VL's vision tower, which is not built yet; load Qwen-Image or Qwen-Image-2512 for text to image");
  }
  const int64_t text_dim = s.config.text_dim;
  const SafetensorsFile te(component_path(o, "text_encoder", "--text-encoder", "qwen_2.5_vl_7b.safetensors", {"text_encoders", "clip"},
                                          [text_dim](const SafetensorsFile& f) {
                                            const auto* embed = f.find("model.embed_tokens.weight");
                                            return embed && embed->shape.size() == 2 && embed->shape[1] == text_dim &&
                                                   f.find("model.layers.0.self_attn.q_proj.bias");
                                          }));
  const auto text = qwen25vl_config(te);
  if (text.hidden != text_dim) {
    throw InputError(te.path() + ": a text encoder " + std::to_string(text.hidden) + " wide, but the transformer reads " +
                     std::to_string(text_dim) + " (Qwen-Image uses Qwen2.5-VL-7B: qwen_2.5_vl_7b.safetensors)");
  }
  const std::string vae = component_path(o, "vae", "--vae", "qwen_image_vae.safetensors", {"vae"},
                                         [](const SafetensorsFile& f) { return is_qwenimage_vae(f, ""); });
  const auto vae_config = qwenimage_vae_config(SafetensorsFile(vae), "");
  s.parts = {transformer_part({o.checkpoint, s.prefix}, s.config),
             PartSpec{"Qwen2.5-VL text encoder", "the Qwen2.5-VL text encoder", {te.path(), "model."}, te.path() + ": no text encoder",
                      DecoderLmImpl::ignorable_keys(text),
                      [text](const SafetensorsFile&, const std::string&) { return std::make_shared<DecoderLmImpl>(text); },
                      text.layer_weights()},
             PartSpec{"autoencoder", "the Qwen-Image autoencoder", {vae, ""}, o.checkpoint + ": no Qwen-Image autoencoder",
                      qwenimage_vae_temporal_keys(vae_config),
                      [](const SafetensorsFile& f, const std::string& p) {
                        return std::make_shared<QwenImageVaeImpl>(qwenimage_vae_config(f, p));
                      },
                      0}};
  return s;
}

class QwenImageFamily final : public ComponentSet {
 public:
  QwenImageFamily(const LoadOptions& o, const at::Device& device, QwenImageSetup setup)
      : ComponentSet(std::move(setup.parts), o.storage, device), config_(setup.config), traits_(qwenimage_traits(setup.config.dim)) {
    // the tokenizer as Z-Image finds it (Qwen2.5-VL's has the same vocabulary and merges):
    // --qwen-tokenizer, else beside the model, FP8S_QWEN_TOKENIZER, the data folders
    tokenizer_ = std::make_shared<const QwenTokenizer>(QwenTokenizer::find(component_file(o, "qwen_tokenizer"), o.checkpoint));
    check_at_open();
  }

  const FamilyTraits& traits() const override { return traits_; }

  std::shared_ptr<FamilyConditioning> encode(const GenerationRequest& r, const std::string& prompt,
                                             const std::string& negative) override {
    const auto compute = compute_dtype(r.compute, device());
    const int given = static_cast<int>(option_number(traits_.options, r.options, "qwen-max-length"));
    const int rows = given > 0 ? given : kDefaultRows;
    auto c = std::make_shared<QwenImageConditioning>();
    c->cond = encode_text(prompt, rows, compute);
    // true CFG runs with a negative prompt only, as QwenImagePipeline does
    if (r.cfg > 1.0f && !plain_prompt(negative).empty()) c->uncond = encode_text(negative, rows, compute);
    text_done();
    return c;
  }

  at::Tensor sigmas(const GenerationRequest&, int steps, int64_t latent_h, int64_t latent_w) const override {
    return at::tensor(qwenimage_sigmas(steps, (latent_h / 2) * (latent_w / 2)), at::kFloat);
  }

  PassDenoiser denoiser(const FamilyConditioning& cond, const GenerationRequest& r, const SamplingInit&,
                        const std::function<void(double)>& on_model_ms, const std::atomic<bool>*) override {
    const auto& c = static_cast<const QwenImageConditioning&>(cond);
    return qwenimage_denoiser(transformer(), c.cond, c.uncond, r.cfg, compute_dtype(r.compute, device()), device(), on_model_ms);
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

  // One transformer call at σ = 0.5 on a random latent_size² latent and 32 random text rows.
  std::vector<float> probe(const StorageSpec& storage, ComputeType compute, uint64_t seed, int latent_size,
                           const std::vector<LoraRequest>& loras, LoraMode mode) override {
    use_for_probe(storage, loras, mode);
    const int64_t side = std::max<int64_t>(2, latent_size / 2 * 2);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto x = at::randn({1, 16, side, side}, gen, at::kFloat);
    const auto txt = at::randn({1, 32, config_.text_dim}, gen, at::kFloat);
    auto out = transformer()
                   .forward(x.to(device()), at::full({1}, 0.5f), txt.to(device()), at::Tensor(), {}, compute_dtype(compute, device()))
                   .to(at::kCPU, at::kFloat)
                   .contiguous();
    return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  }

 protected:
  uint64_t working_bytes(int w, int h, int batch, ComputeType compute) const override {
    return flux_working_bytes(w, h, batch, compute, config_.dim);
  }
  DenoiserLoraLayout lora_layout() const override { return plan_qwenimage_lora_layout; }

 private:
  QwenImageTransformerImpl& transformer() { return part_as<QwenImageTransformerImpl>(Part::Denoiser); }
  QwenImageVaeImpl& vae() { return part_as<QwenImageVaeImpl>(Part::Vae); }

  // the template's tokens (at most 1024 + 34) -> the last hidden state -> 34 rows dropped, `rows` kept
  at::Tensor encode_text(const std::string& prompt, int rows, at::ScalarType compute) {
    auto ids = tokenizer_->encode(qwenimage_template(plain_prompt(prompt)));
    if (ids.size() > static_cast<std::size_t>(kTokenLimit)) ids.resize(kTokenLimit);
    const auto tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).unsqueeze(0);
    const auto mask = at::ones_like(tokens);
    const auto hidden = part_as<DecoderLmImpl>(Part::Text).forward(tokens, mask, compute).to(at::kCPU, at::kFloat);
    return qwenimage_prompt_embeds(hidden, mask, rows).first;
  }

  QwenImageConfig config_;
  FamilyTraits traits_;
  std::shared_ptr<const QwenTokenizer> tokenizer_;
};

}  // namespace

std::vector<FamilyOption> qwenimage_options() {
  using T = FamilyOption::Type;
  return {{"qwen-max-length", "Qwen length", "Qwen length", T::Integer, 0, 4096, "0", {},
           "Qwen-Image: the prompt embeddings' rows after the template's 34 (0: 512)", false, false, false, {}}};
}

std::vector<ComponentRole> qwenimage_roles() {
  return {{"text_encoder", "Qwen2.5-VL text encoder", {"qwen_2.5_vl_7b", "qwen_2.5_vl", "qwen2.5_vl", "qwen25vl", "qwen2_5_vl"},
           "text-encoder", "Qwen-Image: qwen_2.5_vl_7b.safetensors"},
          {"vae", "autoencoder", {"qwen_image_vae", "qwen-image-vae", "qwen_image", "wan_2.1_vae", "wan2.1_vae"}, "vae",
           "Qwen-Image: qwen_image_vae.safetensors"},
          {"qwen_tokenizer", "Qwen tokenizer", {"tokenizer"}, "qwen-tokenizer", "Qwen's tokenizer.json or its folder", true}};
}

FamilyTraits qwenimage_traits(int dim) {
  // one token: 2x2 latent pixels of the 8x autoencoder (the tiny reference one downsamples 8x too)
  FamilyTraits t = transformer_traits("qwen-image", "Qwen-Image", 16, "Qwen2.5-VL encode");
  t.native_size = dim < 3072 ? 64 : 1328;  // the tiny reference transformers are narrow and small
  t.size_presets = {{1328, 1328}, {1664, 928}, {928, 1664}, {1472, 1136}, {1136, 1472}, {1584, 1056}, {1056, 1584}, {1024, 1024}, {512, 512}};
  t.default_steps = 30;
  t.default_cfg = 4.0f;  // true CFG, with a negative prompt (diffusers' true_cfg_scale)
  t.components = qwenimage_roles();
  t.options = qwenimage_options();
  t.latent = flux_latent_format(8);
  t.latent.channels = 16;
  t.compare_modes = "fp16,fp8-e4m3";
  return t;
}

StorageSpec qwenimage_auto_storage(const SafetensorsFile& file) {
  const auto prefix = qwenimage_prefix(file);
  return prefix ? released_storage(file, *prefix + "transformer_blocks.0.attn.to_q.weight") : StorageSpec{WeightType::BF16};
}

WeightBytes qwenimage_estimate(const LoadOptions& o, const StorageSpec& storage) {
  const auto setup = qwenimage_setup(o);
  return parts_estimate(setup.parts[0].source, setup.parts[1].source, setup.parts[2].source, storage);
}

ResidencyPlan qwenimage_plan(const LoadOptions& o, const StorageSpec& storage, uint64_t budget) {
  const SafetensorsFile file(o.checkpoint);  // the transformer only: its components need not be found
  const auto prefix = qwenimage_prefix(file);
  if (!prefix) throw InputError(o.checkpoint + ": no Qwen-Image transformer to plan");
  return denoiser_plan(transformer_part({o.checkpoint, *prefix}, qwenimage_config(file, *prefix)), storage, budget);
}

std::vector<ComponentInfo> qwenimage_components(const LoadOptions& o) {
  const auto setup = qwenimage_setup(o);
  std::vector<ComponentInfo> out;
  for (const auto& p : setup.parts) out.push_back({p.name, p.source.path, "", 0});
  return out;
}

std::unique_ptr<FamilyModel> open_qwenimage(const LoadOptions& options, const at::Device& device) {
  return std::make_unique<QwenImageFamily>(options, device, qwenimage_setup(options));
}

}  // namespace fp8s
