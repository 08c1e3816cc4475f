// Flux's hooks for the CLI's tools (docs/architecture.md): the probe roles, each reading the
// component it needs from the probe's file (a component file or an all-in-one checkpoint), and the
// synthetic layouts of its components and LoRAs.
#include <algorithm>

#include "core/error.h"
#include "families/flux/flux_family.h"
#include "pipeline/family_options.h"
#include "families/flux/flux_model.h"
#include "io/safetensors.h"
#include "models/component_load.h"
#include "models/flux/flux.h"
#include "models/t5/t5.h"
#include "models/text_encoder.h"
#include "models/vae.h"
#include "lora/lora_library.h"
#include "pipeline/engine.h"
#include "pipeline/run_support.h"

namespace fp8s {

StorageSpec released_storage(const SafetensorsFile& file, const std::string& key) {
  // the weight's FP8 format when it is FP8, else BF16 (the released type)
  const auto* w = file.find(key);
  if (w && is_fp8_dtype(w->dtype)) {
    return {fp8_format_of(w->dtype) == Fp8Format::E5M2 ? WeightType::FP8_E5M2 : WeightType::FP8_E4M3, Fp8Scale::None, false};
  }
  return {WeightType::BF16, Fp8Scale::None, false};
}

const std::vector<std::string>& flux_family_archs() {
  static const std::vector<std::string> names{"flux-dev", "flux-schnell", "t5xxl", "clip-l", "flux-ae"};
  return names;
}

std::vector<LayoutEntry> flux_family_layout(const std::string& arch, std::optional<Dtype> dtype, int depth,
                                            int single_depth) {
  const BuildOn on(at::Device(at::kMeta));
  std::shared_ptr<torch::nn::Module> m;
  Dtype base = Dtype::F16;
  const bool flux = arch == "flux-dev" || arch == "flux-schnell";
  if ((depth > 0 && !flux && arch != "t5xxl") || (single_depth > 0 && !flux)) {
    throw InputError("make-synthetic: --depth applies to flux-dev, flux-schnell and t5xxl, --single-depth to Flux");
  }
  if (flux) {
    auto c = parse_flux_config("", arch == "flux-dev", arch);
    if (depth > 0) c.depth = depth;
    if (single_depth > 0) c.depth_single_blocks = single_depth;
    m = std::make_shared<FluxImpl>(c);
    base = Dtype::BF16;
  } else if (arch == "t5xxl") {
    T5Config c;
    if (depth > 0) c.num_layers = depth;
    m = std::make_shared<T5EncoderImpl>(c);
  } else if (arch == "clip-l") {
    TextEncoderConfig c;
    c.name = "clip_l";
    c.position_ids = false;
    m = std::make_shared<TextEncoderImpl>(c);
  } else if (arch == "flux-ae") {
    VaeConfig c;
    c.quant_convs = false;
    c.z_channels = c.embed_dim = 16;
    m = std::make_shared<VaeImpl>(c);
    base = Dtype::F32;
    if (dtype && is_fp8_dtype(*dtype)) throw InputError("make-synthetic: the Flux autoencoder is written in fp16, bf16 or fp32");
  } else {
    throw InputError("unknown Flux-family layout '" + arch + "'");
  }
  return module_layout(*m, base, dtype);
}

namespace {

// make-synthetic's tiny set (the conformance suite's, tests/test_conformance.cpp): the
// configurations of ../shared/reference/flux's tiny files, written into the metadata as there.
const std::map<std::string, std::pair<std::string, std::string>>& tiny_flux_configs() {
  static const std::map<std::string, std::pair<std::string, std::string>> configs{
      {"tiny-flux-dev",
       {"flux.config", R"({"hidden_size": 64, "num_heads": 2, "depth": 2, "depth_single_blocks": 3, "axes_dim": [8, 12, 12], )"
                       R"("theta": 10000, "mlp_ratio": 4.0, "in_channels": 64, "vec_in_dim": 32, "context_in_dim": 48, "guidance_embed": true})"}},
      {"tiny-t5xxl", {"t5.config", R"({"d_model": 48, "d_kv": 8, "num_heads": 4, "d_ff": 96, "num_layers": 2, "vocab_size": 32128, )"
                                   R"("relative_attention_num_buckets": 32, "relative_attention_max_distance": 128})"}},
      {"tiny-clip-l", {"clip.config", R"({"width": 32, "layers": 2, "heads": 2, "mlp": 64})"}},
      {"tiny-flux-ae", {"ae.config", R"({"ch": 32, "ch_mult": [1, 2], "num_res_blocks": 1, "z_channels": 16, )"
                                     R"("scale_factor": 0.3611, "shift_factor": 0.1159})"}}};
  return configs;
}

std::vector<LayoutEntry> tiny_flux_layout(const std::string& arch, std::optional<Dtype> dtype,
                                          std::map<std::string, std::string>& metadata) {
  const auto& [key, json] = tiny_flux_configs().at(arch);
  metadata[key] = json;
  const BuildOn on(at::Device(at::kMeta));
  if (arch == "tiny-flux-dev") {
    FluxImpl m(parse_flux_config(json, true, arch));
    return module_layout(m, Dtype::BF16, dtype);
  }
  if (arch == "tiny-t5xxl") {
    T5EncoderImpl m(parse_t5_config(json, arch));
    return module_layout(m, Dtype::F16, dtype);
  }
  if (arch == "tiny-clip-l") {
    TextEncoderConfig c;
    c.name = "clip_l";
    c.position_ids = false;
    c.width = 32, c.layers = 2, c.heads = 2, c.mlp_dim = 64;
    TextEncoderImpl m(c);
    return module_layout(m, Dtype::F16, dtype);
  }
  if (dtype && is_fp8_dtype(*dtype)) throw InputError("make-synthetic: the Flux autoencoder is written in fp16, bf16 or fp32");
  VaeConfig c;
  c.quant_convs = false;
  c.ch = 32, c.ch_mult = {1, 2}, c.num_res_blocks = 1, c.z_channels = c.embed_dim = 16;
  VaeImpl m(c);
  return module_layout(m, Dtype::F32, dtype);
}

std::map<std::string, at::Tensor> run_flux_probe(const std::string& role, const ProbeSetup& s, const ProbeInputs& read) {
  FluxFiles files;
  {
    const SafetensorsFile f(s.model);
    const auto c = flux_contents(f);
    if (c.transformer) files.transformer = {s.model, *c.transformer};
    if (c.t5) files.t5 = {s.model, *c.t5};
    if (c.clip_l) files.clip_l = {s.model, *c.clip_l};
    if (c.vae) files.vae = {s.model, *c.vae};
    files.dev = c.dev;
    const bool needs_transformer = role == "flux" || role == "flux-sample";
    if (needs_transformer && !c.transformer) throw InputError(s.model + ": not a Flux transformer (no double_blocks.*)");
  }
  const auto compute = compute_dtype(s.compute, s.device);
  FluxModel model(files, s.storage, s.device);
  model.set_loras(s.loras, s.lora_mode);
  static const std::map<std::string, std::map<std::string, int64_t>> kInputs{
      {"t5", {{"tokens", 2}}},
      {"clip-pooled", {{"tokens", 2}}},
      {"flux", {{"img", 3}, {"img_ids", 3}, {"txt", 3}, {"txt_ids", 3}, {"t", 1}, {"y", 2}}},
      {"flux-vae-decode", {{"latent", 4}}},
      {"flux-vae-encode", {{"image", 4}}},
      {"flux-sample", {{"noise", 4}, {"txt", 3}, {"y", 2}}}};
  auto dims = kInputs.at(role);
  if (role == "flux" && files.dev) dims["guidance"] = 1;
  auto in = read(dims);
  std::map<std::string, at::Tensor> out;
  if (role == "t5") {
    out["hidden"] = model.encode_t5(in["tokens"], compute);
  } else if (role == "clip-pooled") {
    const auto [pooled, hidden] = model.encode_clip(in["tokens"], compute);
    out["pooled"] = pooled;
    out["hidden"] = hidden;
  } else if (role == "flux") {
    out["pred"] = model.transformer(in["img"], in["img_ids"], in["txt"], in["txt_ids"], in["t"].reshape({-1}), in["y"],
                                    in.count("guidance") ? in["guidance"].reshape({-1}) : at::Tensor(), compute);
  } else if (role == "flux-vae-decode") {
    out["image"] = model.vae_decode(in["latent"], compute);
  } else if (role == "flux-vae-encode") {
    out["latent"] = model.vae_encode(in["image"], compute);
  } else {
    FluxGuidance guidance;
    const auto declared = flux_options(true);
    guidance.distilled = static_cast<float>(option_number(declared, s.options, "guidance"));
    out["latent"] = model.sample(in["noise"], in["txt"], in["y"], s.steps, guidance, !option_flag(declared, s.options, "no-shift"), compute);
  }
  return out;
}

ProbeStages flux_probe_stages() {
  return {{"t5", "clip-pooled", "flux", "flux-vae-decode", "flux-vae-encode", "flux-sample"}, run_flux_probe};
}

FluxFiles files_of(const LoadOptions& o) {
  return resolve_flux_files(o.checkpoint, component_file(o, "t5xxl"), component_file(o, "clip_l"), component_file(o, "vae"));
}

WeightBytes flux_estimate(const LoadOptions& o, const StorageSpec& storage) {
  const auto b = flux_storage_bytes(files_of(o), storage);
  return {b.transformer, b.t5 + b.clip_l, b.vae};
}

ResidencyPlan flux_plan(const LoadOptions& o, const StorageSpec& storage, uint64_t budget) {
  const auto files = files_of(o);
  return flux_residency_plan(files.transformer, files.dev, storage, budget);
}

StorageSpec flux_auto_storage(const SafetensorsFile& file) {
  const auto c = flux_contents(file);
  return c.transformer ? released_storage(file, *c.transformer + "double_blocks.0.img_attn.qkv.weight") : StorageSpec{WeightType::BF16};
}

SyntheticWriters flux_synthetic_writers() {
  SyntheticWriters w;
  w.archs = flux_family_archs();
  for (const auto& [arch, config] : tiny_flux_configs()) w.archs.push_back(arch);
  w.layout = [](const std::string& arch, const SyntheticLayoutOptions& o, std::map<std::string, std::string>& metadata) {
    if (tiny_flux_configs().count(arch)) {
      if (o.depth > 0 || o.single_depth > 0) throw InputError("make-synthetic: --depth and --single-depth do not apply to " + arch);
      return tiny_flux_layout(arch, o.dtype, metadata);
    }
    return flux_family_layout(arch, o.dtype, o.depth, o.single_depth);
  };
  w.lora = [](const std::string& model, const std::string&, const SyntheticLoraOptions& o) {
    if (!flux_contents(SafetensorsFile(model)).transformer) {
      throw InputError(model + ": a Flux LoRA is made for a transformer file (double_blocks.*); this has none");
    }
    make_synthetic_flux_lora(model, o.rank, o.alpha, o.strength, o.seed, o.out, o.overwrite);
  };
  return w;
}

}  // namespace

std::vector<ComponentInfo> flux_components(const LoadOptions& o) {
  const auto f = files_of(o);
  auto row = [](const char* name, const ComponentSource& c) { return ComponentInfo{name, c.found() ? c.path : "not found", "", 0}; };
  return {row("transformer", f.transformer), row("T5-XXL", f.t5), row("CLIP-L", f.clip_l), row("autoencoder", f.vae)};
}

// inspect's components: the file's by their prefixes; every Linear weight but the autoencoder's is
// quantisable
static InspectParts flux_inspect_parts(const SafetensorsFile& file) {
  const FluxFileContents c = flux_contents(file);
  InspectParts parts{"Flux.1", {}};
  for (const auto& [label, p] : {std::pair{"transformer", c.transformer}, std::pair{"t5xxl", c.t5},
                                 std::pair{"clip_l", c.clip_l}, std::pair{"vae", c.vae}}) {
    if (p) parts.parts.push_back({label, *p, std::string(label) != "vae"});
  }
  return parts;
}

FamilyTools flux_tools() {
  FamilyTools t;
  t.estimate = flux_estimate;
  t.auto_storage = flux_auto_storage;
  t.plan = flux_plan;
  t.probe = flux_probe_stages();
  t.synthetic = flux_synthetic_writers();
  t.components = flux_components;
  t.inspect_parts = flux_inspect_parts;
  return t;
}

}  // namespace fp8s
