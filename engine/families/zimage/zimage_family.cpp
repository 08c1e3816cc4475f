#include "families/zimage/zimage_family.h"

#include <algorithm>

#include "core/error.h"
#include "models/component_load.h"
#include "pipeline/family_options.h"
#include "models/lm/decoder_lm.h"
#include "families/zimage/zimage_files.h"
#include "families/zimage/zimage_model.h"
#include "families/zimage/zimage_sampling.h"
#include "families/zimage/zimage_transformer.h"
#include "lora/lora_library.h"
#include "families/lora_set.h"
#include "pipeline/engine.h"
#include "pipeline/run_support.h"

namespace fp8s {
namespace {

std::optional<std::string> zimage_prefix(const SafetensorsFile& file) { return zimage_contents(file).transformer; }

// A Qwen3 text encoder's prefix: Hugging Face's `model.`, or inside a ComfyUI all-in-one file.
std::string qwen3_prefix(const SafetensorsFile& file) {
  if (const auto p = zimage_contents(file).text_encoder) return *p;
  throw InputError(file.path() + ": not a Qwen3 text encoder (no model.layers.0.self_attn.q_norm.weight)");
}

std::map<std::string, at::Tensor> run_zimage_probe(const std::string& role, const ProbeSetup& s, const ProbeInputs& read) {
  const SafetensorsFile file(s.model);
  if (role == "zimage" || role == "zimage-sample") {
    const auto prefix = zimage_prefix(file);
    if (!prefix) throw InputError(s.model + ": not a Z-Image transformer (no cap_embedder.1.weight with noise_refiner.* and layers.*)");
    const BuildOn on(s.device);
    ZImageTransformer m(zimage_config(file, *prefix));
    load_module_weights(*m, file, *prefix, s.storage, true, ZImageTransformerImpl::ignorable_keys(), {}, s.device, true);
    if (role == "zimage-sample") {
      std::map<std::string, int64_t> dims{{"noise", 4}, {"cap", 3}};
      if (s.cfg > 1) dims["neg"] = 3;
      if (s.strength < 1) dims["init"] = 4;
      auto in = read(dims);
      const auto declared = zimage_options();
      const ZImageSampling z{s.steps, option_number(declared, s.options, "shift"), s.cfg, option_number(declared, s.options, "cfg-norm"),
                             option_number(declared, s.options, "cfg-truncation"), s.strength};
      return {{"latent", zimage_sample(*m, in["noise"], in["cap"], in.count("neg") ? in["neg"] : at::Tensor(),
                                       in.count("init") ? in["init"] : at::Tensor(), z, compute_dtype(s.compute, s.device))}};
    }
    auto in = read({{"x", 4}, {"t", 1}, {"cap", 3}, {"cap_len", 1}});
    const auto len = in["cap_len"].to(at::kLong).reshape({-1}).contiguous();
    const std::vector<int64_t> cap_len(len.data_ptr<int64_t>(), len.data_ptr<int64_t>() + len.numel());
    return {{"pred", m->forward(in["x"], in["t"], in["cap"], cap_len, compute_dtype(s.compute, s.device))}};
  }
  const std::string prefix = qwen3_prefix(file);
  const BuildOn on(s.device);
  DecoderLm encoder(decoder_lm_config(file, prefix, {}, "qwen3.config"));
  load_module_weights(*encoder, file, prefix, s.storage, is_quantised(s.storage.weights), DecoderLmImpl::ignorable_keys(encoder->config()), {}, s.device, true);
  auto in = read({{"tokens", 2}, {"mask", 2}});
  return {{"hidden", encoder->forward(in["tokens"].to(at::kLong), in["mask"], compute_dtype(s.compute, s.device))}};
}

// make-synthetic's layouts: the transformer as ComfyUI's diffusion_models file (BF16; --depth:
// fewer layers) and Qwen3-4B as text_encoders/qwen_3_4b.safetensors (BF16, every layer and the
// final norm, no lm_head; --depth: fewer layers). An FP8 --dtype makes the 2-D Linear weights FP8.
// And the conformance suite's tiny ones (tests/test_conformance.cpp: the configurations of ../shared/reference/zimage's tiny
// files, written into the metadata as there; tiny-qwen3 --depth N: N layers, 3 by default).
std::vector<LayoutEntry> zimage_layout(const std::string& arch, const SyntheticLayoutOptions& o,
                                       std::map<std::string, std::string>& metadata) {
  if (o.single_depth > 0) throw InputError("make-synthetic: --single-depth applies to Flux, not " + arch);
  const BuildOn on(at::Device(at::kMeta));
  const bool tiny = arch.rfind("tiny-", 0) == 0;
  if (arch == "zimage-turbo" || arch == "tiny-zimage-turbo") {
    ZImageConfig c;
    if (tiny) {
      c = {64, 2, 1, 1, 2, 32, 16, 170, 64, 1024, 16, 2, {8, 12, 12}, 256, 1000, 1e-5};
      metadata["zimage.config"] = R"({"dim": 64, "n_layers": 2, "n_refiner_layers": 1, "n_heads": 2, "n_kv_heads": 2, "cap_feat_dim": 16, )"
                                  R"("axes_dims": [8, 12, 12], "rope_theta": 256.0, "t_scale": 1000.0, "norm_eps": 1e-05, "in_channels": 16, )"
                                  R"("patch_size": 2, "ffn_hidden": 170, "adaln_dim": 64, "t_embed_mid": 1024})";
    }
    if (o.depth > 0) c.layers = o.depth;
    ZImageTransformerImpl m(c);
    return module_layout(m, Dtype::BF16, o.dtype);
  }
  DecoderLmConfig c;
  if (tiny) {
    c.hidden = 16, c.intermediate = 40, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.head_dim = 8;
    metadata["qwen3.config"] = R"({"vocab_size": 151936, "hidden_size": 16, "intermediate_size": 40, "num_attention_heads": 4, )"
                               R"("num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0})";
  }
  if (o.depth > 0) c.layers = o.depth;
  c.outputs = {c.layers};  // every layer and the final norm, as the released file holds them
  c.normed_last = true;
  DecoderLmImpl m(c);
  auto out = module_layout(m, Dtype::BF16, o.dtype, "model.");
  std::sort(out.begin(), out.end(), [](const LayoutEntry& a, const LayoutEntry& b) { return a.name < b.name; });
  return out;
}

}  // namespace

std::vector<FamilyOption> zimage_options() {
  using T = FamilyOption::Type;
  return {{"shift", "Shift", "Shift", T::Number, 0, 100, "3", {}, "Z-Image: the schedule's shift (0: the model's, 3)", true, false, true, {}},
          {"cfg-norm", "CFG norm", "CFG normalization", T::Number, 0, 1000, "0", {},
           "Z-Image with CFG: cap the guided prediction's norm at K times the prompt's (0: off)", false, false, false, {}},
          {"cfg-truncation", "CFG truncation", "CFG truncation", T::Number, 0, 1, "1", {},
           "Z-Image with CFG: steps past this t (1 - sigma) run without CFG (1: never)", false, false, false, {}},
          {"qwen-max-length", "Qwen length", "Qwen length", T::Integer, 0, 4096, "0", {},
           "Z-Image: the templated prompt's token limit (0: 512)", false, false, false, {}}};
}

std::vector<ComponentRole> zimage_roles() {
  return {{"text_encoder", "Qwen3 text encoder", {"qwen_3_4b", "qwen3"}, "text-encoder", "Z-Image: qwen_3_4b.safetensors"},
          {"vae", "autoencoder", {"ae", "flux", "z_image"}, "vae", "ae.safetensors"},
          {"qwen_tokenizer", "Qwen tokenizer", {"tokenizer"}, "qwen-tokenizer", "Z-Image: Qwen's tokenizer.json or its folder", true}};
}

FamilyEntry zimage_family_entry() {
  FamilyEntry e;
  e.id = "zimage";
  e.label = "Z-Image Turbo";
  e.detect = [](const SafetensorsFile& file) { return zimage_prefix(file).has_value(); };
  e.traits = [](const SafetensorsFile& file) {
    const auto c = zimage_contents(file);
    const int dim = c.transformer ? static_cast<int>(file.at(*c.transformer + "x_embedder.weight").shape.at(0)) : 3840;
    return zimage_traits(dim, dim < 3840 ? 2 : 8);  // the tiny reference files' autoencoder downsamples 2x
  };
  e.open = open_zimage;
  e.options = zimage_options();
  e.roles = zimage_roles();
  e.tools.estimate = zimage_estimate;
  e.tools.plan = zimage_plan;
  e.tools.auto_storage = zimage_auto_storage;
  e.tools.folder_names = {zimage_diffusers_names};
  e.tools.inspect_parts = [](const SafetensorsFile& file) {
    const auto c = zimage_contents(file);
    InspectParts p{"Z-Image Turbo", {}};
    if (c.transformer) p.parts.push_back({"transformer", *c.transformer, true});
    if (c.text_encoder) p.parts.push_back({"text_encoder", *c.text_encoder, true});
    if (c.vae) p.parts.push_back({"vae", *c.vae, false});
    return p;
  };
  e.tools.probe = {{"qwen3", "zimage", "zimage-sample"}, run_zimage_probe};
  e.tools.components = [](const LoadOptions& o) {
    const auto f = zimage_files(o);
    return std::vector<ComponentInfo>{{"transformer", f.transformer.path, "", 0}, {"Qwen3 text encoder", f.text_encoder.path, "", 0},
                                      {"autoencoder", f.vae.path, "", 0}};
  };
  e.tools.synthetic.archs = {"zimage-turbo", "qwen3-4b", "tiny-zimage-turbo", "tiny-qwen3"};
  e.tools.synthetic.layout = zimage_layout;
  // make-synthetic-lora: every Linear layer of the transformer under ComfyUI's diffusion_model. names
  e.tools.synthetic.lora_archs = {"zimage-turbo"};
  e.tools.synthetic.lora = [](const std::string& model, const std::string& arch, const SyntheticLoraOptions& o) {
    std::map<std::string, std::vector<int64_t>> weights;
    if (model.empty()) {
      std::map<std::string, std::string> metadata;
      for (const auto& entry : zimage_layout(arch, {}, metadata)) weights[entry.name] = entry.shape;
    } else {
      const auto prefix = zimage_prefix(SafetensorsFile(model));
      if (!prefix) throw InputError(model + ": a Z-Image LoRA is made for a transformer file (layers.*, noise_refiner.*); this has none");
      weights = lora_linear_weights({model, *prefix});
    }
    write_diffusion_model_lora(weights, "z_image_turbo", o.rank, o.alpha, o.strength, o.seed, o.out, o.overwrite);
  };
  return e;
}

}  // namespace fp8s
