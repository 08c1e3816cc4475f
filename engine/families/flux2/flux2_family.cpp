#include "families/flux2/flux2_family.h"

#include <algorithm>

#include "core/error.h"
#include "models/checkpoint_layout.h"
#include "models/vae.h"
#include "models/inspect.h"
#include "models/component_load.h"
#include "families/flux2/flux2_ae.h"
#include "families/lora_set.h"
#include "families/flux2/flux2_folder.h"
#include "families/flux2/flux2_model.h"
#include "families/flux2/flux2_sampling.h"
#include "models/flux2/flux2.h"
#include "pipeline/family_options.h"
#include "models/lm/decoder_lm.h"
#include "pipeline/engine.h"
#include "pipeline/run_support.h"

namespace fp8s {
namespace {

// make-synthetic's layouts: the transformers as ComfyUI's diffusion_models/ files (BF16; --depth and
// --single-depth: fewer double and single blocks, for benchmarks), klein 9B's Qwen3-8B, dev's
// Mistral Small 3.2 as ComfyUI prunes it (30 layers, no final norm; its Tekken tokenizer is not
// written: name it with --mistral-tokenizer) and the autoencoder (F32, its BatchNorm statistics
// included). klein 4B's Qwen3-4B is Z-Image's `qwen3-4b`.
// And the conformance suite's tiny klein and autoencoder (tests/test_conformance.cpp: the
// configurations of ../shared/reference/flux2's tiny files, written into the metadata as there; its
// Qwen3 is Z-Image's tiny-qwen3 with --depth 28).
std::vector<LayoutEntry> flux2_layout(const std::string& arch, const SyntheticLayoutOptions& o,
                                      std::map<std::string, std::string>& metadata) {
  const BuildOn on(at::Device(at::kMeta));
  if (arch == "tiny-flux2-klein") {
    if (o.depth > 0 || o.single_depth > 0) throw InputError("make-synthetic: --depth and --single-depth do not apply to " + arch);
    Flux2Config c{64, 4, 2, 2, {2, 6, 4, 4}, 2000, 3.0, 1e-6, 128, 48, false};
    metadata["flux2.config"] = R"({"hidden_size": 64, "num_heads": 4, "head_dim": 16, "depth": 2, "depth_single_blocks": 2, )"
                               R"("axes_dim": [2, 6, 4, 4], "theta": 2000, "mlp_ratio": 3.0, "in_channels": 128, "context_in_dim": 48, )"
                               R"("guidance_embed": false, "eps": 1e-06})";
    Flux2Impl m(c);
    return module_layout(m, Dtype::BF16, o.dtype);
  }
  if (arch == "flux2-dev" || arch == "flux2-klein-4b" || arch == "flux2-klein-9b") {
    Flux2Config c;  // dev's
    if (arch != "flux2-dev") {
      const bool k4 = arch == "flux2-klein-4b";
      c.hidden_size = k4 ? 3072 : 4096;
      c.num_heads = k4 ? 24 : 32;
      c.depth = k4 ? 5 : 8;
      c.depth_single_blocks = k4 ? 20 : 24;
      c.context_in_dim = k4 ? 7680 : 12288;
      c.guidance_embed = false;
    }
    if (o.depth > 0) c.depth = o.depth;
    if (o.single_depth > 0) c.depth_single_blocks = o.single_depth;
    Flux2Impl m(c);
    return module_layout(m, Dtype::BF16, o.dtype);
  }
  if (o.depth > 0 || o.single_depth > 0) {
    throw InputError("make-synthetic: --depth and --single-depth apply to the FLUX.2 transformers, not " + arch);
  }
  if (arch == "flux2-ae" || arch == "tiny-flux2-ae") {
    if (o.dtype && is_fp8_dtype(*o.dtype)) throw InputError("make-synthetic: the FLUX.2 autoencoder is written in fp16, bf16 or fp32");
    VaeConfig c;
    c.quant_convs = c.quant_convs_in_coders = true;
    c.z_channels = c.embed_dim = 32;
    if (arch == "tiny-flux2-ae") {
      c.ch = 32, c.ch_mult = {1, 2}, c.num_res_blocks = 1;
      metadata["flux2_ae.config"] = R"({"ch": 32, "ch_mult": [1, 2], "num_res_blocks": 1, "z_channels": 32, "patch": [2, 2], "bn_eps": 0.0001})";
    }
    VaeImpl m(c);
    auto out = module_layout(m, Dtype::F32, o.dtype);
    const Dtype floats = o.dtype.value_or(Dtype::F32);
    out.push_back({"bn.running_mean", {128}, TensorRole::NormBias, Component::Vae, floats});
    out.push_back({"bn.running_var", {128}, TensorRole::NormWeight, Component::Vae, floats});
    out.push_back({"bn.num_batches_tracked", {}, TensorRole::Buffer, Component::Vae, Dtype::I64});
    std::sort(out.begin(), out.end(), [](const LayoutEntry& a, const LayoutEntry& b) { return a.name < b.name; });
    return out;
  }
  DecoderLmConfig c;
  if (arch == "qwen3-8b") {
    c.hidden = 4096;
    c.intermediate = 12288;
    c.outputs = {c.layers};  // every layer and the final norm, as the released file holds them
    c.normed_last = true;
  } else {
    c.name = "Mistral";
    c.vocab_size = 131072;
    c.hidden = 5120;
    c.intermediate = 32768;
    c.layers = 30;
    c.qk_norm = false;
    c.outputs = {30};  // no final norm
  }
  DecoderLmImpl m(c);
  return module_layout(m, Dtype::BF16, o.dtype, "model.");
}

// A probe's transformer: the file's, in the probe's storage on its device.
Flux2 load_transformer(const ProbeSetup& s) {
  const SafetensorsFile file(s.model);
  const auto prefix = flux2_prefix(file);
  if (!prefix) throw InputError(s.model + ": not a FLUX.2 transformer (no double_stream_modulation_img.lin.weight)");
  const BuildOn on(s.device);
  Flux2 model(flux2_config(file, *prefix));
  load_module_weights(*model, file, *prefix, s.storage, true, {}, {}, s.device, true);
  return model;
}

// One transformer call (`flux2`): with reference tokens (`ref`, `ref_ids`: an edit's images), the
// sequence is img ++ ref and the prediction is the first N rows.
at::Tensor flux2_call(const ProbeSetup& s, const ProbeInputs& read) {
  Flux2 model = load_transformer(s);
  const auto& config = model->config();
  std::map<std::string, int64_t> dims{{"img", 3}, {"img_ids", 2}, {"txt", 3}, {"txt_ids", 2}, {"t", 1}, {"ref", -3}, {"ref_ids", -2}};
  if (config.guidance_embed) dims["guidance"] = 1;
  auto in = read(dims);
  const int64_t n = in["img"].size(1);
  at::Tensor img = in["img"], ids = in["img_ids"];
  if (in.count("ref")) img = at::cat({img, in["ref"]}, 1), ids = at::cat({ids, in["ref_ids"]}, 0);
  const auto pred = model->forward(img, ids, in["txt"], in["txt_ids"], in["t"].reshape({-1}),
                                   in.count("guidance") ? in["guidance"].reshape({-1}) : at::Tensor(),
                                   compute_dtype(s.compute, s.device));
  return pred.narrow(1, 0, n);
}


// The whole loop (`flux2-sample`): klein CFG with `neg`, an edit's `ref`, img2img's `init`.
at::Tensor flux2_sample_role(const ProbeSetup& s, const ProbeInputs& read) {
  Flux2 model = load_transformer(s);
  auto in = read({{"noise", 4}, {"txt", 3}, {"neg", -3}, {"ref", -4}, {"init", -4}});
  Flux2Guidance g;
  g.cfg = s.cfg;
  if (model->config().guidance_embed) g.distilled = static_cast<float>(option_number(flux2_options(true), s.options, "guidance"));
  std::vector<at::Tensor> refs;
  if (in.count("ref")) refs.push_back(in["ref"]);
  return flux2_sample(*model, in["noise"], in["txt"], in.count("neg") ? in["neg"] : at::Tensor(), refs,
                      in.count("init") ? in["init"] : at::Tensor(), s.steps, s.strength, g, compute_dtype(s.compute, s.device));
}

std::map<std::string, at::Tensor> run_flux2_probe(const std::string& role, const ProbeSetup& s, const ProbeInputs& read) {
  if (role == "flux2") return {{"pred", flux2_call(s, read)}};
  if (role == "flux2-sample") return {{"latent", flux2_sample_role(s, read)}};
  if (role == "flux2-vae-decode" || role == "flux2-vae-encode") {
    auto ae = load_flux2_autoencoder(SafetensorsFile(s.model), "", s.storage, s.device);
    const auto compute = compute_dtype(s.compute, s.device);
    if (role == "flux2-vae-decode") return {{"image", ae->decode_model(read({{"latent", 4}})["latent"], compute, s.device)}};
    return {{"latent", ae->encode_model(read({{"image", 4}})["image"].to(s.device), compute)}};
  }
  const SafetensorsFile file(s.model);
  const auto config = flux2_text_config(file, role == "flux2-mistral");
  const BuildOn on(s.device);
  DecoderLm encoder(config);
  // a Mistral file may carry the Pixtral vision tower and projector, and the tokenizer (tekken_model)
  auto ignorable = DecoderLmImpl::ignorable_keys(config);
  load_module_weights(*encoder, file, "model.", s.storage, is_quantised(s.storage.weights), ignorable, {}, s.device, true);
  auto in = read({{"tokens", 2}, {"mask", 2}});
  return {{"embeds", encoder->forward(in["tokens"].to(at::kLong), in["mask"], compute_dtype(s.compute, s.device))}};
}

}  // namespace

FamilyEntry flux2_family_entry() {
  FamilyEntry e;
  e.id = "flux2";
  e.label = "FLUX.2 klein and dev";
  e.detect = [](const SafetensorsFile& file) { return flux2_prefix(file).has_value(); };
  e.traits = [](const SafetensorsFile& file) { return flux2_model_traits(file, flux2_prefix(file).value_or(""), 8); };
  e.open = open_flux2;
  e.tools.estimate = flux2_estimate;
  e.tools.plan = flux2_plan;
  e.tools.folder_names = {flux2_diffusers_names};
  e.roles = flux2_roles();
  e.tools.probe = {{"flux2-qwen3", "flux2-mistral", "flux2", "flux2-sample", "flux2-vae-decode", "flux2-vae-encode"}, run_flux2_probe};
  e.options = flux2_options(true);
  e.tools.synthetic.archs = {"flux2-dev", "flux2-klein-4b", "flux2-klein-9b", "flux2-ae", "qwen3-8b", "mistral3-small-te",
                              "tiny-flux2-klein", "tiny-flux2-ae"};
  e.tools.synthetic.layout = flux2_layout;
  // make-synthetic-lora: every Linear layer of a transformer file under ComfyUI's diffusion_model. names
  e.tools.synthetic.lora = [](const std::string& model, const std::string&, const SyntheticLoraOptions& o) {
    const auto prefix = flux2_prefix(SafetensorsFile(model));
    if (!prefix) throw InputError(model + ": a FLUX.2 LoRA is made for a transformer file (double_stream_modulation_img.*); this has none");
    write_diffusion_model_lora(lora_linear_weights({model, *prefix}), "flux2", o.rank, o.alpha, o.strength, o.seed, o.out, o.overwrite);
  };
  e.tools.inspect_parts = [](const SafetensorsFile& file) {
    const auto prefix = flux2_prefix(file);
    InspectParts p{prefix ? flux2_model_traits(file, *prefix, 8).name : "FLUX.2", {}};
    if (prefix) p.parts.push_back({"transformer", *prefix, true});
    return p;
  };
  return e;
}

}  // namespace fp8s
