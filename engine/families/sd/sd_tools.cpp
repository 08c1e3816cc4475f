// SD1's and SDXL's hooks for the CLI's tools (docs/architecture.md): the probe roles (CLIP, SDXL's
// two text encoders and ADM vector, the UNet, the VAE and a whole sampling run, on a checkpoint)
// and the synthetic checkpoints and LoRAs of the presets.
#include "core/error.h"
#include "families/sd/control.h"
#include "families/sd/model.h"
#include "models/component_load.h"
#include "models/controlnet.h"
#include "families/sd/sd_family.h"
#include "lora/lora_library.h"
#include "models/architecture.h"
#include "models/checkpoint_layout.h"
#include "models/config.h"
#include "models/inspect.h"
#include "pipeline/engine.h"
#include "pipeline/run_support.h"

namespace fp8s {
namespace {

// `controlnet`: one ControlNet call (the model is the ControlNet file): its residuals, unscaled.
std::map<std::string, at::Tensor> run_controlnet_probe(const ProbeSetup& s, const ProbeInputs& read) {
  const auto cn = load_controlnet(s.model, s.storage, s.device);
  std::map<std::string, int64_t> dims{{"x", 4}, {"hint", 4}, {"t", 0}, {"context", 3}};
  if (cn.net->control_config().sdxl()) dims["y"] = 2;
  auto in = read(dims);
  const auto compute = compute_dtype(s.compute, s.device);
  const auto r = cn.net->forward(in["x"].to(s.device), in["hint"].to(s.device), in["t"].reshape({-1}).to(s.device),
                                 in["context"].to(s.device), in.count("y") ? in["y"].to(s.device) : at::Tensor(), compute);
  std::map<std::string, at::Tensor> out;
  for (std::size_t i = 0; i < r.down.size(); ++i) out["down_" + std::to_string(i)] = r.down[i].to(at::kCPU, at::kFloat);
  out["mid"] = r.mid.to(at::kCPU, at::kFloat);
  return out;
}

std::map<std::string, at::Tensor> run_sd_probe(const std::string& role, const ProbeSetup& s, const ProbeInputs& read) {
  if (role == "controlnet") return run_controlnet_probe(s, read);
  static const std::map<std::string, std::map<std::string, int64_t>> kInputs{
      {"clip", {{"tokens", 2}}},
      {"unet", {{"x", 4}, {"t", 0}, {"context", 0}}},
      {"unet-control", {{"x", 4}, {"t", 0}, {"context", 0}, {"mid", 4}}},
      {"vae-decode", {{"latent", 4}}},
      {"vae-encode", {{"image", 4}}},
      {"sample", {{"noise", 4}, {"cond", 0}, {"uncond", 0}}},
      {"sdxl-text", {{"tokens_l", 2}, {"tokens_g", 0}}},
      {"adm", {{"pooled", 0}, {"size_cond", 2}}}};
  Model model(s.model, s.storage, s.device);
  model.set_loras(s.loras, s.lora_mode);
  auto dims = kInputs.at(role);
  if (model.is_sdxl() && (role == "unet" || role == "unet-control")) dims["y"] = 0;
  if (role == "unet-control") {  // down_0 ... down_(K-1): one per input block
    const auto& u = model.config().unet;
    for (std::size_t i = 0; i < u.channel_mult.size() * static_cast<std::size_t>(u.num_res_blocks + 1); ++i) {
      dims["down_" + std::to_string(i)] = 4;
    }
  }
  ControlUnitRun unit;
  if (role == "sample" && !s.controlnet.empty()) {
    dims["hint"] = 4;
    unit.net = load_controlnet(s.controlnet, s.storage, s.device, &model.config().unet, &model.file()).net;
    unit.strength = s.control_strength;
    unit.start = s.control_start;
    unit.end = s.control_end;
  }
  if (model.is_sdxl() && role == "sample") dims["y_cond"] = dims["y_uncond"] = 0;
  auto in = read(dims);
  std::shared_ptr<PassControl> control;
  if (unit.net) {
    unit.hint = in["hint"];
    control = std::make_shared<PassControl>(std::vector<ControlUnitRun>{unit});
  }
  const auto compute = s.compute;
  std::map<std::string, at::Tensor> out;
  if (role == "clip") {
    out["hidden"] = model.encode_tokens(in["tokens"].to(at::kLong), s.clip_skip, compute);
  } else if (role == "sdxl-text") {
    const auto t = model.encode_sdxl(in["tokens_l"].to(at::kLong), in["tokens_g"].to(at::kLong), compute);
    out["hidden_l"] = t.hidden_l;
    out["hidden_g"] = t.hidden_g;
    out["context"] = t.context;
    out["pooled"] = t.pooled;
  } else if (role == "adm") {
    out["y"] = model.sdxl_vector(in["pooled"], in["size_cond"]);
  } else if (role == "unet") {
    out["eps"] = model.unet(in["x"], in["t"].reshape({-1}), in["context"], in.count("y") ? in["y"] : at::Tensor(), compute);
  } else if (role == "unet-control") {
    UNetControl c;
    for (std::size_t i = 0; in.count("down_" + std::to_string(i)); ++i) c.down.push_back(in["down_" + std::to_string(i)] * s.control_strength);
    c.mid = in["mid"] * s.control_strength;
    out["eps"] = model.unet(in["x"], in["t"].reshape({-1}), in["context"], in.count("y") ? in["y"] : at::Tensor(), compute, nullptr, &c);
  } else if (role == "vae-decode") {
    out["image"] = model.vae_decode(in["latent"], compute);
  } else if (role == "vae-encode") {
    out["latent"] = model.vae_encode(in["image"], compute);
  } else {
    SamplingParams p;
    p.sampler = s.sampler;
    p.schedule = s.schedule;
    p.steps = s.steps;
    p.cfg = s.cfg;
    p.seed = s.seed;
    out["latent"] = model.sample(in["noise"], in["cond"], in["uncond"], p, compute, {}, nullptr, {},
                                 in.count("y_cond") ? in["y_cond"] : at::Tensor(),
                                 in.count("y_uncond") ? in["y_uncond"] : at::Tensor(), control);
  }
  return out;
}

ProbeStages sd_probe_stages() {
  return {{"clip", "sdxl-text", "adm", "unet", "vae-decode", "vae-encode", "sample", "controlnet", "unet-control"}, run_sd_probe};
}

WeightBytes sd_estimate(const LoadOptions& o, const StorageSpec& storage) {
  const auto report = inspect_checkpoint(SafetensorsFile(o.checkpoint));
  WeightBytes w;
  for (const auto& c : report.components) {
    const uint64_t bytes = predicted_bytes(c, storage);
    if (c.name == "unet") w.denoiser += bytes;
    else if (c.name == "vae") w.vae += bytes;
    else if (c.name != "other") w.text += bytes;
  }
  return w;
}

ResidencyPlan sd_plan(const LoadOptions& o, const StorageSpec& storage, uint64_t budget) {
  return unet_residency_plan(SafetensorsFile(o.checkpoint), storage, budget);
}

StorageSpec sd_auto_storage(const SafetensorsFile& file) { return default_storage(inspect_checkpoint(file)); }

SyntheticWriters sd_synthetic_writers() {
  SyntheticWriters w;
  w.archs = {"sd15", "sdxl", "tiny-sd1", "tiny-sdxl"};
  w.lora_archs = w.archs;
  w.archs.push_back("controlnet-sd15");
  w.layout = [](const std::string& arch, const SyntheticLayoutOptions& o, std::map<std::string, std::string>& metadata) {
    if (arch == "controlnet-sd15") {  // control_v11p_sd15_*'s layout: cldm names under control_model.
      if (o.depth || o.single_depth) throw InputError("make-synthetic: --depth does not apply to " + arch);
      ControlNetConfig c;
      c.unet = preset_by_name("sd15")->unet;
      const BuildOn on(at::Device(at::kMeta));
      ControlNetImpl m(c);
      return module_layout(m, Dtype::F16, o.dtype, "control_model.");
    }
    if (o.dtype && is_fp8_dtype(*o.dtype)) throw InputError("make-synthetic writes SD checkpoints in fp16, bf16 or fp32");
    if (o.depth || o.single_depth) throw InputError("make-synthetic: --depth does not apply to " + arch);
    const auto config = *preset_by_name(arch);
    if (!config.ldm_config_json.empty()) metadata["ldm.config"] = config.ldm_config_json;
    return checkpoint_layout(config, o.dtype.value_or(Dtype::F16));
  };
  w.lora = [](const std::string& model, const std::string& arch, const SyntheticLoraOptions& o) {
    const ModelConfig config = model.empty() ? *preset_by_name(arch) : config_for(SafetensorsFile(model));
    make_synthetic_lora(config, o.rank, o.alpha, o.strength, o.seed, o.out, o.overwrite);
  };
  return w;
}

}  // namespace

// inspect on a ControlNet file: its layout and base in the architecture line, its layers (convs
// too) quantisable as load_controlnet quantises them. Empty (SD's own names) for anything else.
InspectParts sd_inspect_parts(const SafetensorsFile& file) {
  const auto c = controlnet_contents(file);
  if (!c || file.find("model.diffusion_model.input_blocks.0.0.weight")) return {};  // a ControlNet 1.0 checkpoint: SD's names
  if (c->control_lora) return {"Control-LoRA (lora_controlnet; not supported yet)", {{"controlnet", "", false}}};
  const auto config = controlnet_config(controlnet_file(file.path(), *c), c->prefix);
  const int context = config.unet.context_dim;
  const std::string base = config.sdxl() ? "SDXL" : context == 1024 ? "SD 2.x" : "SD 1.x";
  const std::string layout = c->diffusers ? "diffusers ControlNetModel names"
                             : c->prefix.empty() ? "cldm names without control_model."
                                                 : "ControlNet 1.1 names under control_model.";
  return {"ControlNet for " + base + " (" + layout + (c->difference ? "; a \"diff\" ControlNet" : "") + ")",
          {{"controlnet", "", true, true}}};
}

FamilyTools sd_tools() {
  // an SD checkpoint holds its components (inspect's table lists them)
  FamilyTools t;
  t.estimate = sd_estimate;
  t.auto_storage = sd_auto_storage;
  t.plan = sd_plan;
  t.probe = sd_probe_stages();
  t.synthetic = sd_synthetic_writers();
  t.inspect_parts = sd_inspect_parts;
  return t;
}

}  // namespace fp8s
