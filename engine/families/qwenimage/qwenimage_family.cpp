#include "families/qwenimage/qwenimage_family.h"

#include <algorithm>

#include "core/compute_choice.h"
#include "core/error.h"
#include "families/lora_set.h"
#include "families/qwenimage/qwenimage_folder.h"
#include "families/qwenimage/qwenimage_model.h"
#include "families/qwenimage/qwenimage_sampling.h"
#include "families/qwenimage/qwenimage_text.h"
#include "families/qwenimage/qwenimage_transformer.h"
#include "families/qwenimage/qwenimage_vae.h"
#include "models/component_load.h"
#include "models/inspect.h"
#include "models/lm/decoder_lm.h"
#include "pipeline/engine.h"
#include "pipeline/run_support.h"

namespace fp8s {
namespace {

// A probe's module from the file: built on the probe's device, loaded in its storage.
template <class Net, class Config>
Net probe_module(const ProbeSetup& s, const SafetensorsFile& file, const Config& config, const std::string& prefix, bool quantise,
                 const std::vector<std::string>& ignorable) {
  const BuildOn on(s.device);
  Net m(config);
  load_module_weights(*m, file, prefix, s.storage, quantise, ignorable, {}, s.device, true);
  return m;
}

std::map<std::string, at::Tensor> run_qwenimage_probe(const std::string& role, const ProbeSetup& s, const ProbeInputs& read) {
  const SafetensorsFile file(s.model);
  const auto compute = compute_dtype(s.compute, s.device);
  if (role == "qwenimage" || role == "qwenimage-sample") {
    const auto prefix = qwenimage_prefix(file);
    if (!prefix) throw InputError(s.model + ": not a Qwen-Image transformer (no txt_norm.weight beside img_in.weight)");
    auto m = probe_module<QwenImageTransformer>(s, file, qwenimage_config(file, *prefix), *prefix, true,
                                                QwenImageTransformerImpl::ignorable_keys());
    if (role == "qwenimage-sample") {
      auto in = read({{"noise", 4}, {"txt", 3}, {"neg", -3}, {"init", -4}});
      return {{"latent", qwenimage_sample(*m, in["noise"], in["txt"], in.count("neg") ? in["neg"] : at::Tensor(),
                                          in.count("init") ? in["init"] : at::Tensor(), s.steps, s.cfg, s.strength, compute)}};
    }
    auto in = read({{"x", 4}, {"t", 1}, {"txt", 3}, {"txt_mask", 2}, {"ref", -4}});
    std::vector<at::Tensor> refs;
    if (in.count("ref")) refs.push_back(in["ref"]);
    return {{"pred", m->forward(in["x"], in["t"].reshape({-1}), in["txt"], in["txt_mask"], refs, compute)}};
  }
  if (role == "qwen-vae-decode" || role == "qwen-vae-encode") {
    const auto config = qwenimage_vae_config(file, "");
    auto vae = probe_module<QwenImageVae>(s, file, config, "", false, qwenimage_vae_temporal_keys(config));
    if (role == "qwen-vae-decode") return {{"image", vae->decode(read({{"latent", 4}})["latent"], compute)}};
    return {{"latent", vae->encode(read({{"image", 4}})["image"], compute)}};
  }
  const auto config = qwen25vl_config(file);
  auto encoder = probe_module<DecoderLm>(s, file, config, "model.", is_quantised(s.storage.weights), DecoderLmImpl::ignorable_keys(config));
  auto in = read({{"tokens", 2}, {"mask", 2}});
  const auto mask = in["mask"].to(at::kLong);
  const auto hidden = encoder->forward(in["tokens"].to(at::kLong), mask, compute);
  return {{"hidden", hidden}, {"embeds", qwenimage_prompt_embeds(hidden.to(at::kCPU), mask.to(at::kCPU), 512).first}};
}

// Qwen2.5-VL's vision tower and lm_head as the released text-encoder file holds them (never read
// here: the text-only path), so make-synthetic writes that file's exact layout.
void add_vision_tower(std::vector<LayoutEntry>& out, const DecoderLmConfig& text, Dtype dtype) {
  const int64_t w = 1280, mlp = 3420, merged = 5120;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, TensorRole role) {
    out.push_back({name, std::move(shape), role, Component::Other, dtype});
  };
  add("visual.patch_embed.proj.weight", {w, 3, 2, 14, 14}, TensorRole::ConvWeight);
  for (int m = 0; m < 32; ++m) {
    const std::string b = "visual.blocks." + std::to_string(m) + ".";
    add(b + "norm1.weight", {w}, TensorRole::NormWeight);
    add(b + "norm2.weight", {w}, TensorRole::NormWeight);
    add(b + "attn.qkv.weight", {3 * w, w}, TensorRole::LinearWeight);
    add(b + "attn.qkv.bias", {3 * w}, TensorRole::Bias);
    add(b + "attn.proj.weight", {w, w}, TensorRole::LinearWeight);
    add(b + "attn.proj.bias", {w}, TensorRole::Bias);
    for (const char* p : {"gate_proj", "up_proj"}) {
      add(b + "mlp." + p + ".weight", {mlp, w}, TensorRole::LinearWeight);
      add(b + "mlp." + p + ".bias", {mlp}, TensorRole::Bias);
    }
    add(b + "mlp.down_proj.weight", {w, mlp}, TensorRole::LinearWeight);
    add(b + "mlp.down_proj.bias", {w}, TensorRole::Bias);
  }
  add("visual.merger.ln_q.weight", {w}, TensorRole::NormWeight);
  add("visual.merger.mlp.0.weight", {merged, merged}, TensorRole::LinearWeight);
  add("visual.merger.mlp.0.bias", {merged}, TensorRole::Bias);
  add("visual.merger.mlp.2.weight", {text.hidden, merged}, TensorRole::LinearWeight);
  add("visual.merger.mlp.2.bias", {text.hidden}, TensorRole::Bias);
  add("lm_head.weight", {text.vocab_size, text.hidden}, TensorRole::LinearWeight);
}

// make-synthetic's layouts: the transformer as ComfyUI's diffusion_models/ file (BF16; --depth:
// fewer blocks), Qwen2.5-VL-7B as text_encoders/qwen_2.5_vl_7b.safetensors (its vision tower and
// lm_head included; --depth: fewer layers) and the autoencoder as vae/qwen_image_vae.safetensors; and the conformance
// suite's tiny ones (the configurations of ../shared/reference/qwenimage's tiny files, written into
// the metadata as there; the tiny text encoder without a vision tower).
std::vector<LayoutEntry> qwenimage_layout(const std::string& arch, const SyntheticLayoutOptions& o,
                                          std::map<std::string, std::string>& metadata) {
  if (o.single_depth > 0) throw InputError("make-synthetic: --single-depth applies to Flux, not " + arch);
  const BuildOn on(at::Device(at::kMeta));
  const bool tiny = arch.rfind("tiny-", 0) == 0;
  if (arch == "qwen-image" || arch == "tiny-qwen-image") {
    QwenImageConfig c;
    if (tiny) {
      c.dim = 32, c.heads = 2, c.layers = 2, c.text_dim = 16, c.mlp = 128, c.axes_dim = {4, 6, 6};
      metadata["qwenimage.config"] = R"({"patch_size": 2, "in_channels": 64, "out_channels": 16, "num_layers": 2, "attention_head_dim": 16, )"
                                     R"("num_attention_heads": 2, "joint_attention_dim": 16, "axes_dims_rope": [4, 6, 6], "rope_theta": 10000, )"
                                     R"("eps": 1e-06, "mlp_hidden": 128, "timestep_dim": 256})";
    }
    if (o.depth > 0) c.layers = o.depth;
    QwenImageTransformerImpl m(c);
    return module_layout(m, Dtype::BF16, o.dtype);
  }
  if (arch == "qwen-image-vae" || arch == "tiny-qwen-image-vae") {
    if (o.depth > 0) throw InputError("make-synthetic: --depth applies to the Qwen-Image transformer and text encoder, not " + arch);
    if (o.dtype && is_fp8_dtype(*o.dtype)) throw InputError("make-synthetic: the Qwen-Image autoencoder is written in fp16, bf16 or fp32");
    QwenImageVaeConfig c;
    if (tiny) {
      c.base_dim = 8;
      metadata["qwenimage_vae.config"] = R"({"base_dim": 8, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [], )"
                                         R"("temperal_downsample": [false, true, true]})";
    }
    QwenImageVaeImpl m(c);
    auto out = module_layout(m, Dtype::BF16, o.dtype);
    // the temporal convolutions the file holds (one frame never runs them)
    const Dtype dtype = o.dtype.value_or(Dtype::BF16);
    for (const auto& t : qwenimage_vae_temporal_convs(c)) {
      out.push_back({t.prefix + ".weight", {t.out, t.in, 3, 1, 1}, TensorRole::ConvWeight, Component::Vae, dtype});
      out.push_back({t.prefix + ".bias", {t.out}, TensorRole::Bias, Component::Vae, dtype});
    }
    std::sort(out.begin(), out.end(), [](const LayoutEntry& a, const LayoutEntry& b) { return a.name < b.name; });
    return out;
  }
  DecoderLmConfig c;
  c.vocab_size = 152064, c.hidden = 3584, c.intermediate = 18944, c.layers = 28, c.heads = 28, c.kv_heads = 4, c.head_dim = 128;
  c.qk_norm = false, c.qkv_bias = true;
  if (tiny) {
    c.hidden = 16, c.intermediate = 40, c.layers = 3, c.heads = 2, c.kv_heads = 1, c.head_dim = 8;
    metadata["qwen25vl.config"] = R"({"text": {"vocab_size": 152064, "hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 3, )"
                                  R"("num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0}})";
  }
  if (o.depth > 0) c.layers = o.depth;
  c.outputs = {c.layers};  // every layer and the final norm, as the released file holds them
  c.normed_last = true;
  DecoderLmImpl m(c);
  auto out = module_layout(m, Dtype::BF16, o.dtype, "model.");
  if (!tiny) add_vision_tower(out, c, Dtype::BF16);
  std::sort(out.begin(), out.end(), [](const LayoutEntry& a, const LayoutEntry& b) { return a.name < b.name; });
  return out;
}

}  // namespace

FamilyEntry qwenimage_family_entry() {
  FamilyEntry e;
  e.id = "qwenimage";
  e.label = "Qwen-Image";
  e.detect = [](const SafetensorsFile& file) { return qwenimage_prefix(file).has_value(); };
  e.traits = [](const SafetensorsFile& file) {
    const auto prefix = qwenimage_prefix(file);
    const auto* img_in = prefix ? file.find(*prefix + "img_in.weight") : nullptr;
    return qwenimage_traits(img_in && !img_in->shape.empty() ? static_cast<int>(img_in->shape[0]) : 3072);
  };
  e.open = open_qwenimage;
  e.options = qwenimage_options();
  e.roles = qwenimage_roles();
  e.tools.estimate = qwenimage_estimate;
  e.tools.plan = qwenimage_plan;
  e.tools.auto_storage = qwenimage_auto_storage;
  e.tools.components = qwenimage_components;
  e.tools.folder_names = {qwen25vl_transformers_names, qwenimage_vae_diffusers_names};  // a diffusers folder's text_encoder/ and vae/
  e.tools.inspect_parts = [](const SafetensorsFile& file) {
    const auto prefix = qwenimage_prefix(file);
    InspectParts p{"Qwen-Image", {}};
    if (prefix) p.parts.push_back({"transformer", *prefix, true});
    return p;
  };
  e.tools.probe = {{"qwen25vl", "qwenimage", "qwenimage-sample", "qwen-vae-decode", "qwen-vae-encode"}, run_qwenimage_probe};
  e.tools.synthetic.archs = {"qwen-image", "qwen2.5-vl-7b", "qwen-image-vae", "tiny-qwen-image", "tiny-qwen25vl", "tiny-qwen-image-vae"};
  e.tools.synthetic.layout = qwenimage_layout;
  // make-synthetic-lora: every Linear layer of the transformer under ComfyUI's diffusion_model. names
  e.tools.synthetic.lora_archs = {"qwen-image"};
  e.tools.synthetic.lora = [](const std::string& model, const std::string& arch, const SyntheticLoraOptions& o) {
    std::map<std::string, std::vector<int64_t>> weights;
    if (model.empty()) {
      std::map<std::string, std::string> metadata;
      for (const auto& entry : qwenimage_layout(arch, {}, metadata)) {
        if (entry.role == TensorRole::LinearWeight) weights[entry.name] = entry.shape;
      }
    } else {
      const auto prefix = qwenimage_prefix(SafetensorsFile(model));
      if (!prefix) throw InputError(model + ": a Qwen-Image LoRA is made for a transformer file (transformer_blocks.*, txt_norm); this has none");
      weights = lora_linear_weights({model, *prefix});
    }
    write_diffusion_model_lora(weights, "qwen_image", o.rank, o.alpha, o.strength, o.seed, o.out, o.overwrite);
  };
  return e;
}

}  // namespace fp8s
