// probe: replays one engine stage on tensors from a file and writes the outputs to a file, so that
// independent implementations can be compared with ours name by name (reference/README.md).
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "fp8/codec.h"
#include "io/safetensors.h"
#include "models/quant_probe.h"
#include "models/nn.h"
#include "pipeline/family.h"

namespace fp8s::cli {
namespace {

void probe_fp8(const std::string& role, const std::string& format_name, const std::string& in_path,
               const std::string& out_path, bool overwrite) {
  const Fp8Format format = format_name == "e5m2" ? Fp8Format::E5M2 : Fp8Format::E4M3FN;
  const Dtype f8 = fp8_dtype(format);
  const bool encode = role == "fp8-encode";
  SafetensorsFile in(in_path);
  std::vector<TensorSpec> specs;
  for (const auto& t : in.tensors()) {
    if (!encode && is_fp8_dtype(t.dtype) && t.dtype != f8) {
      throw InputError(in_path + ": tensor '" + t.name + "' is " + dtype_name(t.dtype) +
                       " but --format is " + format_name);
    }
    Dtype out = t.dtype;
    if (encode && t.dtype == Dtype::F32) out = f8;
    if (!encode && t.dtype == f8) out = Dtype::F32;
    specs.push_back({t.name, out, t.shape});
  }
  SafetensorsWriter writer(out_path, specs, in.metadata(), overwrite);
  std::vector<uint8_t> raw;
  for (std::size_t i = 0; i < in.tensors().size(); ++i) {
    const auto& t = in.tensors()[i];
    raw.resize(t.nbytes());
    in.read(t, raw.data());
    const auto n = static_cast<std::size_t>(t.numel());
    if (specs[i].dtype == f8 && t.dtype == Dtype::F32) {
      std::vector<uint8_t> codes(n);
      encode_f32_to_fp8(reinterpret_cast<const float*>(raw.data()), codes.data(), n, format);
      writer.append(codes.data(), n);
    } else if (specs[i].dtype == Dtype::F32 && t.dtype == f8) {
      std::vector<float> values(n);
      decode_fp8_to_f32(raw.data(), values.data(), n, format);
      writer.append(values.data(), n * 4);
    } else {
      writer.append(raw.data(), raw.size());
    }
  }
  writer.commit();
}

}  // namespace

namespace {

struct ModelProbeOptions {
  std::string model, case_file, prefix, out;
  std::vector<std::string> inputs;  // role=NAME overrides
  std::string weights = "fp32", scale = "none", compute = "fp32", device = "auto";
  int clip_skip = 1;
  std::string sampler = "euler", schedule = "normal";
  int steps = 20;
  float cfg = 7.0f;
  uint64_t seed = 0;
  std::vector<std::string> loras;
  std::string lora_mode = "auto";
  bool overwrite = false;
  float strength = 1.0f;  // an img2img sampling role's
  std::map<std::string, std::string> options;  // the families' declared settings (--guidance, --shift, ...)
  std::string controlnet;  // ControlNet roles
  float control_strength = 1.0f, control_start = 0.0f, control_end = 1.0f;
  std::string layer, shape;  // the formats roles (dequant, linear): a layer and its logical N,K
  bool per_channel = false;  // quantize: per row
  int convrot = 0;           // quantize: int8 ConvRot's order
};

// Reads the case's input tensors by role (`--input ROLE=NAME` overrides the prefixed name), each
// with the number of dimensions the stage expects (0: any; negative: an optional input of -dims
// dimensions, absent from the result when the case has none).
std::map<std::string, at::Tensor> read_case_inputs(const std::string& role, const std::map<std::string, int64_t>& dims,
                                                   const ModelProbeOptions& o) {
  std::map<std::string, std::string> names;
  for (const auto& [r, d] : dims) names[r] = o.prefix + r;
  for (const auto& spec : o.inputs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos) throw InputError("--input expects ROLE=NAME, got '" + spec + "'");
    const auto r = spec.substr(0, eq);
    if (!names.count(r)) throw InputError("--input: role '" + r + "' is not an input of " + role);
    names[r] = spec.substr(eq + 1);
  }
  SafetensorsFile cases(o.case_file);
  std::map<std::string, at::Tensor> in;
  for (const auto& [r, name] : names) {
    const int64_t want = std::abs(dims.at(r));
    if (dims.at(r) < 0 && !cases.find(name)) continue;
    auto t = read_tensor(cases, cases.at(name));
    if (want != 0 && t.dim() != want && !(want == 1 && t.numel() == t.size(0))) {
      throw InputError(o.case_file + ": input '" + name + "' has " + std::to_string(t.dim()) +
                       " dimensions, expected " + std::to_string(want));
    }
    in[r] = std::move(t);
  }
  return in;
}

void write_case_outputs(const std::map<std::string, at::Tensor>& out, const ModelProbeOptions& o) {
  std::vector<TensorSpec> specs;
  std::vector<at::Tensor> values;
  for (const auto& [name, t] : out) {
    auto c = t.to(at::kCPU, at::kFloat).contiguous();
    specs.push_back({o.prefix + name, Dtype::F32, c.sizes().vec()});
    values.push_back(c);
  }
  SafetensorsWriter writer(o.out, specs, {}, o.overwrite);
  for (const auto& v : values) writer.append(v.data_ptr<float>(), v.numel() * 4);
  writer.commit();
}

// The formats roles (../shared/reference/formats): dequant and linear on one layer of --model,
// quantize on the case's weight.
void probe_formats(const std::string& role, const std::string& format, const ModelProbeOptions& o) {
  if (o.case_file.empty()) throw InputError("probe " + role + " needs --case CASE.safetensors");
  if (role == "quantize") {
    const auto in = read_case_inputs(role, {{"weight", 2}}, o);
    write_case_outputs(probe_quantize(in.at("weight"), format, o.per_channel, o.convrot), o);
    return;
  }
  if (o.model.empty() || o.layer.empty() || o.shape.empty()) throw InputError("probe " + role + " needs --model FILE, --layer NAME and --shape N,K");
  const auto comma = o.shape.find(',');
  int64_t n = 0, k = 0;
  try {
    n = std::stoll(o.shape.substr(0, comma)), k = comma == std::string::npos ? 0 : std::stoll(o.shape.substr(comma + 1));
  } catch (const std::exception&) {
    n = 0;
  }
  if (n <= 0 || k <= 0) throw InputError("--shape expects N,K (the layer's logical out and in features), got '" + o.shape + "'");
  const at::Tensor x = role == "linear" ? read_case_inputs(role, {{"x", 2}}, o).at("x") : at::Tensor();
  auto out = probe_quant_layer(SafetensorsFile(o.model), o.layer, n, k, x);
  if (role == "linear") out.erase("weight");
  write_case_outputs(out, o);
}

// Runs one model stage of the family that answers the role on the case's input tensors and
// writes its outputs (F32) to --out.
void probe_model(const std::string& role, const ModelProbeOptions& o) {
  const FamilyEntry* family = find_probe_family(role);
  if (!family) {
    std::string known;
    for (const auto& f : registered_families()) {
      for (const auto& r : f.tools.probe.roles) known += r + ", ";
    }
    throw InputError("unknown probe role '" + role + "' (known: " + known + "fp8-encode, fp8-decode, dequant, linear, quantize)");
  }
  if (o.model.empty() || o.case_file.empty()) {
    throw InputError("probe " + role + " needs --model FILE and --case CASE.safetensors");
  }
  ProbeSetup s;
  s.model = o.model;
  s.storage.weights = *parse_weight_type(o.weights);
  s.storage.scale = *parse_fp8_scale(o.scale);
  s.device = backend::resolve_device(o.device);
  s.compute = *parse_compute_type(o.compute);
  s.loras = parse_lora_flags(o.loras);
  validate_loras(s.loras);
  s.lora_mode = *parse_lora_mode(o.lora_mode);
  s.clip_skip = o.clip_skip;
  s.sampler = *parse_sampler(o.sampler);
  s.schedule = *parse_schedule(o.schedule);
  s.steps = o.steps;
  s.cfg = o.cfg;
  s.seed = o.seed;
  s.options = o.options;
  s.strength = o.strength;
  s.controlnet = o.controlnet;
  s.control_strength = o.control_strength;
  s.control_start = o.control_start;
  s.control_end = o.control_end;
  const auto out = family->tools.probe.run(role, s, [&](const std::map<std::string, int64_t>& dims) {
    return read_case_inputs(role, dims, o);
  });
  write_case_outputs(out, o);
}

}  // namespace

void register_probe(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string role, format = "e4m3", in;
    ModelProbeOptions m;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "probe", "run one engine stage on tensors from a file (for reference comparisons)");
  add_common_options(*sub, o->common, false);
  sub->add_option("role", o->role,
                  "clip, unet, vae-decode, vae-encode, sample, fp8-encode or fp8-decode")
      ->required();
  sub->add_option("--model", o->m.model, "checkpoint (.safetensors)");
  sub->add_option("--case", o->m.case_file, "tensors of the case (.safetensors)");
  sub->add_option("--prefix", o->m.prefix, "name prefix of the case's tensors");
  sub->add_option("--input", o->m.inputs, "ROLE=NAME: take an input from another tensor")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--weights", o->m.weights, "storage: fp32, fp16, bf16, fp8-e4m3, fp8-e5m2")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2"}))
      ->capture_default_str();
  sub->add_option("--fp8-scale", o->m.scale, "none, tensor or channel")
      ->check(CLI::IsMember({"none", "tensor", "channel"}))
      ->capture_default_str();
  sub->add_option("--compute", o->m.compute, "fp32 or bf16 (fp16 on CUDA)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  add_device_option(*sub, o->m.device);
  sub->add_option("--clip-skip", o->m.clip_skip, "1 = last layer, 2 = penultimate")->capture_default_str();
  sub->add_option("--sampler", o->m.sampler, "euler, euler_ancestral, heun, dpmpp_2m, ddim, lcm")
      ->check([](const std::string& s) { return parse_sampler(s) ? "" : "unknown sampler " + s; })
      ->capture_default_str();
  sub->add_option("--schedule", o->m.schedule, "normal or karras")
      ->check([](const std::string& s) { return parse_schedule(s) ? "" : "unknown schedule " + s; })
      ->capture_default_str();
  sub->add_option("--steps", o->m.steps, "sampling steps")->check(CLI::Range(1, 1000))->capture_default_str();
  sub->add_option("--cfg", o->m.cfg, "classifier-free guidance scale")->capture_default_str();
  sub->add_option("--seed", o->m.seed, "seed of the step noise")->capture_default_str();
  add_family_options(*sub, o->m.options, false);  // the sampling roles' family settings
  sub->add_option("--strength", o->m.strength, "zimage-sample img2img: the strength (1: txt2img)")->capture_default_str();
  sub->add_option("--controlnet", o->m.controlnet, "sample: the ControlNet file (its hint is the case's `hint`)");
  sub->add_option("--control-strength", o->m.control_strength, "unet-control, sample: the residuals' scale")->capture_default_str();
  sub->add_option("--control-start", o->m.control_start, "sample: the ControlNet's first step, as progress 0..1")->capture_default_str();
  sub->add_option("--control-end", o->m.control_end, "sample: its last step, as progress 0..1")->capture_default_str();
  sub->add_option("--lora", o->m.loras, "FILE:MULT")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--lora-mode", o->m.lora_mode, "auto, merge, merge-stochastic, online")
      ->check(CLI::IsMember({"auto", "merge", "merge-stochastic", "online"}))
      ->capture_default_str();
  sub->add_option("--format", o->format,
                  "FP8 format for fp8-encode/fp8-decode: e4m3 or e5m2; quantize: float8_e4m3fn, float8_e5m2, int8_tensorwise, mxfp8, nvfp4")
      ->check(CLI::IsMember({"e4m3", "e5m2", "float8_e4m3fn", "float8_e5m2", "int8_tensorwise", "mxfp8", "nvfp4"}))
      ->capture_default_str();
  sub->add_option("--layer", o->m.layer, "dequant, linear: the layer (its module path, without .weight)");
  sub->add_option("--shape", o->m.shape, "dequant, linear: the layer's logical shape N,K (out, in)");
  sub->add_flag("--per-channel", o->m.per_channel, "quantize: one scale per row");
  sub->add_option("--convrot", o->m.convrot, "quantize: int8 with ConvRot of this order (a power of 4)")->check(CLI::Range(0, 65536));
  sub->add_option("--in", o->in, "input .safetensors");
  sub->add_option("--out", o->m.out, "output .safetensors (written atomically)")->required();
  sub->add_flag("--overwrite", o->m.overwrite, "replace --out if it exists");
  sub->callback([o] {
    if (o->role == "dequant" || o->role == "linear" || o->role == "quantize") {
      probe_formats(o->role, o->format, o->m);
      return;
    }
    if (o->role == "fp8-encode" || o->role == "fp8-decode") {
      if (o->in.empty()) throw InputError("probe " + o->role + " needs --in IN.safetensors");
      probe_fp8(o->role, o->format, o->in, o->m.out, o->m.overwrite);
      return;
    }
    probe_model(o->role, o->m);
  });
}

}  // namespace fp8s::cli
