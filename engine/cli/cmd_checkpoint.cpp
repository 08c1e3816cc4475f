// make-synthetic, inspect and convert: the checkpoint tools.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/logging.h"
#include "models/convert.h"
#include "lora/lora.h"
#include "models/inspect.h"
#include "models/synthetic.h"
#include "pipeline/family.h"

namespace fp8s::cli {
namespace {

Fp8Format format_from_weights(const std::string& weights) {
  return weights == "fp8-e5m2" ? Fp8Format::E5M2 : Fp8Format::E4M3FN;
}

// The --arch names the families write (make-synthetic, or make-synthetic-lora's presets).
std::vector<std::string> synthetic_archs(bool lora) {
  std::vector<std::string> archs;
  for (const auto& f : registered_families()) {
    const auto& a = lora ? f.tools.synthetic.lora_archs : f.tools.synthetic.archs;
    archs.insert(archs.end(), a.begin(), a.end());
  }
  return archs;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

void register_make_synthetic(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string arch, dtype, out;
    uint64_t seed = 0;
    bool overwrite = false, list = false;
    int depth = 0, single_depth = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "make-synthetic", "write a checkpoint with random weights in a real model's exact layout");
  add_common_options(*sub, o->common, false);
  sub->add_option("--arch", o->arch, "a released layout: " + joined(synthetic_archs(false)))
      ->required()
      ->check(CLI::IsMember(synthetic_archs(false)));
  sub->add_option("--dtype", o->dtype,
                  "float type of the weights (default: the released file's); "
                  "fp8-e4m3/fp8-e5m2 (transformers and text encoders): every Linear weight FP8 as the plain FP8 files")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32", "fp8-e4m3", "fp8-e5m2"}));
  sub->add_option("--seed", o->seed, "random seed")->capture_default_str();
  sub->add_option("--out", o->out, "output .safetensors file (never overwritten)");
  sub->add_flag("--overwrite", o->overwrite, "replace --out if it exists");
  sub->add_flag("--list", o->list, "print the layout as JSON ({key: {dtype, shape}}) instead of writing it");
  sub->add_option("--depth", o->depth, "benchmarks: a transformer's double blocks or a text encoder's layers (0: the released count)")
      ->check(CLI::Range(0, 64));
  sub->add_option("--single-depth", o->single_depth, "benchmarks: a transformer's single blocks (0: the released count)")
      ->check(CLI::Range(0, 128));
  sub->callback([o] {
    if (o->out.empty() && !o->list) throw InputError("make-synthetic needs --out FILE (or --list)");
    const std::map<std::string, Dtype> dtypes{{"fp16", Dtype::F16}, {"bf16", Dtype::BF16}, {"fp32", Dtype::F32},
                                              {"fp8-e4m3", Dtype::F8_E4M3}, {"fp8-e5m2", Dtype::F8_E5M2}};
    const std::optional<Dtype> dtype = o->dtype.empty() ? std::nullopt : std::optional<Dtype>(dtypes.at(o->dtype));
    std::map<std::string, std::string> metadata{{"format", "pt"}};
    const auto layout = find_synthetic_family(o->arch)->tools.synthetic.layout(o->arch, {dtype, o->depth, o->single_depth}, metadata);
    if (o->list) {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& e : layout) j[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}};
      std::cout << j.dump() << "\n";
      return;
    }
    auto bar = std::make_unique<ProgressPrinter>("make-synthetic " + o->arch, layout.size(), "tensors");
    make_synthetic_layout(layout, metadata, o->seed, o->out, o->overwrite,
                          [&](std::size_t done, std::size_t, uint64_t) { bar->update(done); });
    bar->finish();
    log().info("wrote {}", o->out);
  });
}

void register_make_synthetic_lora(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string model, arch;
    SyntheticLoraOptions lora;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("make-synthetic-lora", "write a kohya LoRA with random factors for a model layout");
  add_common_options(*sub, o->common, false);
  sub->add_option("--model", o->model, "the model file the LoRA is for (its layout)");
  sub->add_option("--arch", o->arch, "or a preset layout: " + joined(synthetic_archs(true)))
      ->check(CLI::IsMember(synthetic_archs(true)));
  sub->add_option("--rank", o->lora.rank, "rank")->capture_default_str();
  sub->add_option("--alpha", o->lora.alpha, "alpha (the scale is alpha / rank)")->capture_default_str();
  sub->add_option("--strength", o->lora.strength, "rms(ΔW) / rms(W) at multiplier 1")->capture_default_str();
  sub->add_option("--seed", o->lora.seed, "random seed")->capture_default_str();
  sub->add_option("--out", o->lora.out, "output .safetensors (never overwritten)")->required();
  sub->add_flag("--overwrite", o->lora.overwrite, "replace --out if it exists");
  sub->callback([o] {
    if (o->model.empty() == o->arch.empty()) throw InputError("make-synthetic-lora needs either --model or --arch");
    const FamilyEntry* family =
        o->model.empty() ? find_synthetic_family(o->arch, true) : find_family(SafetensorsFile(o->model));
    if (!family || !family->tools.synthetic.lora) throw InputError(o->model + ": no synthetic LoRA is made for this model's family");
    family->tools.synthetic.lora(o->model, o->arch, o->lora);
    log().info("wrote {}", o->lora.out);
  });
}

namespace {

// The residency plan a load under a weight budget would make (the family's, from the headers).
nlohmann::json plan_json(const ResidencyPlan& plan, uint64_t budget, const StorageSpec& storage) {
  nlohmann::json blocks = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.blocks.size(); ++i) {
    const auto& b = plan.blocks[i];
    blocks.push_back({{"name", b.name}, {"bytes", b.bytes}, {"compute_per_byte", b.compute_per_byte}, {"streamed", bool(plan.streamed[i])}});
  }
  return {{"weight_budget", budget}, {"storage", weight_type_name(storage.weights)}, {"summary", plan.describe()},
          {"fixed_bytes", plan.fixed_bytes}, {"resident_block_bytes", plan.resident_bytes},
          {"streamed_bytes_per_pass", plan.streamed_bytes}, {"largest_streamed_bytes", plan.largest_streamed}, {"blocks", blocks}};
}

std::string plan_text(const ResidencyPlan& plan, uint64_t budget, const StorageSpec& storage) {
  char line[160];
  std::snprintf(line, sizeof line, "\nWeight budget %.2f GB, %s: %s\n  outside the blocks (resident first): %.1f MB\n",
                budget / 1e9, weight_type_name(storage.weights), plan.describe().c_str(), plan.fixed_bytes / 1e6);
  std::string out = line;
  for (std::size_t i = 0; i < plan.blocks.size(); ++i) {
    const auto& b = plan.blocks[i];
    std::snprintf(line, sizeof line, "  %-22s %9.1f MB  %s\n", b.name.c_str(), b.bytes / 1e6,
                  plan.streamed[i] ? "streamed" : "resident");
    out += line;
  }
  return out;
}

}  // namespace

void register_inspect(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    ModelFlags flags;  // --model and its components
    std::string weights = "auto", scale = "none", budget;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "inspect", "architecture, parameters and bytes per component at each storage type; with --weight-budget, the residency plan");
  add_common_options(*sub, o->common, true);
  sub->add_option("--model", o->flags.model, "checkpoint (.safetensors; default: the built-in demo model)");
  add_component_options(*sub, o->flags);
  sub->add_option("--weight-budget", o->budget,
                  "print the residency plan a load under this budget makes (e.g. 8G, 0): which blocks stay resident and which stream");
  sub->add_option("--weights", o->weights, "the storage the plan is for: auto (the file's own), fp32, fp16, bf16, fp8-e4m3, fp8-e5m2, int8, mxfp8, nvfp4")
      ->check(CLI::IsMember({"auto", "fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "mxfp8", "nvfp4"}))
      ->capture_default_str();
  sub->add_option("--fp8-scale", o->scale, "the plan's FP8 scaling: none, tensor or channel")
      ->check(CLI::IsMember({"none", "tensor", "channel"}))
      ->capture_default_str();
  sub->callback([o] {
    const LoadOptions load = load_options(o->flags);
    const std::string& model = load.checkpoint;
    SafetensorsFile file(model);
    const auto report = inspect_model_file(file);
    std::optional<uint64_t> budget;
    if (!o->budget.empty()) {
      budget = parse_weight_budget(o->budget);
      if (!budget) throw InputError("inspect --weight-budget: give a size (auto plans at load, from the memory free then)");
    }
    nlohmann::json json = o->common.json ? inspect_report_json(report) : nlohmann::json();
    std::string text = o->common.json ? std::string() : format_inspect_report(report);
    const FamilyEntry* family = find_family(file);
    std::string name;
    try {
      if (family) name = family->traits(file).name;
    } catch (const InputError&) {
      if (report.family.empty()) throw;  // nothing knows the file
      family = nullptr;                  // a file no family loads as a model (a ControlNet): the report names it
    }
    if (family) {  // the family the engine loads it as, and the files its components come from
      json["family"] = name;
      text += "  family:       " + name + "\n";
      if (family->tools.components) {
        try {
          for (const auto& c : family->tools.components(load)) {
            json["family_components"][c.name] = c.path;
            text += "    " + c.name + ": " + c.path + "\n";
          }
        } catch (const InputError& e) {
          json["family_components_error"] = e.what();
          text += "    components: " + std::string(e.what()) + "\n";
        }
      }
    }
    if (budget) {
      if (!family || !family->tools.plan) throw InputError(model + ": no model family plans streaming for this file");
      StorageSpec storage = o->weights == "auto" ? auto_storage_for(model)
                                                 : StorageSpec{*parse_weight_type(o->weights), *parse_fp8_scale(o->scale), false};
      const auto plan = family->tools.plan(load, storage, *budget);
      if (o->common.json) json["residency"] = plan_json(plan, *budget, storage);
      else text += plan_text(plan, *budget, storage);
    }
    std::cout << (o->common.json ? json.dump(2) + "\n" : text);
  });
}

void register_convert(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string model, weights, scale = "none", out;
    bool fp8_vae = false, overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "convert", "store a checkpoint's Linear/Conv2d weights in FP8 (UNet and text encoders), its Linear weights in INT8, MXFP8 "
                 "or NVFP4 (ComfyUI's comfy_quant layers), or all of it in FP16/BF16");
  add_common_options(*sub, o->common, true);
  sub->add_option("--model", o->model, "source checkpoint (.safetensors, 16/32-bit)")->required();
  sub->add_option("--weights,--to", o->weights,
                  "fp8-e4m3 or fp8-e5m2; int8, mxfp8 or nvfp4 (every Linear weight but the autoencoder's and the embeddings, "
                  "as ComfyUI's comfy_quant layers); fp16 or bf16: every float tensor")
      ->required()
      ->check(CLI::IsMember({"fp8-e4m3", "fp8-e5m2", "int8", "mxfp8", "nvfp4", "fp16", "bf16"}));
  sub->add_option("--fp8-scale", o->scale, "none, tensor or channel")
      ->check(CLI::IsMember({"none", "tensor", "channel"}))
      ->capture_default_str();
  sub->add_flag("--fp8-vae", o->fp8_vae, "quantise the VAE's weights too");
  sub->add_option("--out", o->out, "output .safetensors file (never overwritten)")->required();
  sub->add_flag("--overwrite", o->overwrite, "replace --out if it exists");
  sub->callback([o] {
    ConvertOptions c;
    c.in = o->model;
    c.out = o->out;
    c.format = format_from_weights(o->weights);
    c.scale = *parse_fp8_scale(o->scale);
    c.fp8_vae = o->fp8_vae;
    c.overwrite = o->overwrite;
    if (o->weights == "fp16") c.float16 = Dtype::F16;
    if (o->weights == "bf16") c.float16 = Dtype::BF16;
    if (const auto w = parse_weight_type(o->weights); w && is_block_storage(*w)) c.blocks = *w;
    std::unique_ptr<ProgressPrinter> bar;
    const auto summary = convert_checkpoint(c, [&](std::size_t done, std::size_t total) {
      if (!bar) bar = std::make_unique<ProgressPrinter>("convert", total, "tensors");
      bar->update(done);
    });
    if (bar) bar->finish();
    if (o->common.json) {
      std::cout << nlohmann::json{{"out", c.out},
                                  {"quantised_tensors", summary.quantised_tensors},
                                  {"quantised_params", summary.quantised_params},
                                  {"bytes_in", summary.bytes_in},
                                  {"bytes_out", summary.bytes_out}}
                       .dump(2)
                << "\n";
    } else {
      std::printf("%s: %llu weights (%llu parameters) in %s, scale %s; %llu -> %llu bytes\n",
                  c.out.c_str(), static_cast<unsigned long long>(summary.quantised_tensors),
                  static_cast<unsigned long long>(summary.quantised_params), o->weights.c_str(),
                  o->scale.c_str(), static_cast<unsigned long long>(summary.bytes_in),
                  static_cast<unsigned long long>(summary.bytes_out));
    }
  });
}

}  // namespace fp8s::cli
