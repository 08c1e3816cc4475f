// make-synthetic, inspect and convert: the checkpoint tools.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "models/flux/flux_files.h"
#include "core/logging.h"
#include "models/convert.h"
#include "lora/lora.h"
#include "models/inspect.h"
#include "models/synthetic.h"
#include "pipeline/flux_model.h"

namespace fp8s::cli {
namespace {

Fp8Format format_from_weights(const std::string& weights) {
  return weights == "fp8-e5m2" ? Fp8Format::E5M2 : Fp8Format::E4M3FN;
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
  sub->add_option("--arch", o->arch,
                  "sd15, sdxl, tiny-sd1, tiny-sdxl; Flux's components: flux-dev, flux-schnell, t5xxl, clip-l, flux-ae")
      ->required()
      ->check(CLI::IsMember({"sd15", "sdxl", "tiny-sd1", "tiny-sdxl", "flux-dev", "flux-schnell", "t5xxl", "clip-l", "flux-ae"}));
  sub->add_option("--dtype", o->dtype,
                  "float type of the weights (default: the released file's: fp16; Flux bf16, its autoencoder fp32); "
                  "fp8-e4m3/fp8-e5m2 (Flux, T5, CLIP-L): every Linear weight FP8 as the plain FP8 files")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32", "fp8-e4m3", "fp8-e5m2"}));
  sub->add_option("--seed", o->seed, "random seed")->capture_default_str();
  sub->add_option("--out", o->out, "output .safetensors file (never overwritten)");
  sub->add_flag("--overwrite", o->overwrite, "replace --out if it exists");
  sub->add_flag("--list", o->list, "print the layout as JSON ({key: {dtype, shape}}) instead of writing it");
  sub->add_option("--depth", o->depth, "benchmarks: Flux's double blocks or T5's layers (0: the released count)")
      ->check(CLI::Range(0, 64));
  sub->add_option("--single-depth", o->single_depth, "benchmarks: Flux's single blocks (0: the released count)")
      ->check(CLI::Range(0, 128));
  sub->callback([o] {
    if (o->out.empty() && !o->list) throw InputError("make-synthetic needs --out FILE (or --list)");
    const std::map<std::string, Dtype> dtypes{{"fp16", Dtype::F16}, {"bf16", Dtype::BF16}, {"fp32", Dtype::F32},
                                              {"fp8-e4m3", Dtype::F8_E4M3}, {"fp8-e5m2", Dtype::F8_E5M2}};
    const std::optional<Dtype> dtype = o->dtype.empty() ? std::nullopt : std::optional<Dtype>(dtypes.at(o->dtype));
    const auto& flux = flux_family_archs();
    const bool family = std::find(flux.begin(), flux.end(), o->arch) != flux.end();
    if (!family && dtype && is_fp8_dtype(*dtype)) throw InputError("make-synthetic writes SD checkpoints in fp16, bf16 or fp32");
    std::vector<LayoutEntry> layout;
    std::map<std::string, std::string> metadata{{"format", "pt"}};
    if (family) {
      layout = flux_family_layout(o->arch, dtype, o->depth, o->single_depth);
    } else {
      if (o->depth || o->single_depth) throw InputError("make-synthetic: --depth applies to flux-dev, flux-schnell and t5xxl");
      const auto config = *preset_by_name(o->arch);
      layout = checkpoint_layout(config, dtype.value_or(Dtype::F16));
      if (!config.ldm_config_json.empty()) metadata["ldm.config"] = config.ldm_config_json;
    }
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
    std::string model, arch, out;
    int rank = 8;
    double alpha = 8, strength = 0.2;
    uint64_t seed = 0;
    bool overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("make-synthetic-lora", "write a kohya LoRA with random factors for a model layout");
  add_common_options(*sub, o->common, false);
  sub->add_option("--model", o->model, "the checkpoint the LoRA is for (its layout; a Flux transformer too)");
  sub->add_option("--arch", o->arch, "or a preset layout: sd15, sdxl, tiny-sd1, tiny-sdxl")
      ->check(CLI::IsMember({"sd15", "sdxl", "tiny-sd1", "tiny-sdxl"}));
  sub->add_option("--rank", o->rank, "rank")->capture_default_str();
  sub->add_option("--alpha", o->alpha, "alpha (the scale is alpha / rank)")->capture_default_str();
  sub->add_option("--strength", o->strength, "rms(ΔW) / rms(W) at multiplier 1")->capture_default_str();
  sub->add_option("--seed", o->seed, "random seed")->capture_default_str();
  sub->add_option("--out", o->out, "output .safetensors (never overwritten)")->required();
  sub->add_flag("--overwrite", o->overwrite, "replace --out if it exists");
  sub->callback([o] {
    if (o->model.empty() == o->arch.empty()) throw InputError("make-synthetic-lora needs either --model or --arch");
    if (!o->model.empty() && flux_contents(SafetensorsFile(o->model)).transformer) {
      make_synthetic_flux_lora(o->model, o->rank, o->alpha, o->strength, o->seed, o->out, o->overwrite);
      log().info("wrote {}", o->out);
      return;
    }
    const ModelConfig config = o->model.empty() ? *preset_by_name(o->arch) : config_for(SafetensorsFile(o->model));
    make_synthetic_lora(config, o->rank, o->alpha, o->strength, o->seed, o->out, o->overwrite);
    log().info("wrote {}", o->out);
  });
}

void register_inspect(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string model;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "inspect", "architecture, parameters and bytes per component at each storage type");
  add_common_options(*sub, o->common, true);
  sub->add_option("--model", o->model, "checkpoint (.safetensors; default: the built-in demo model)");
  sub->callback([o] {
    SafetensorsFile file(model_or_demo(o->model));
    const auto report = inspect_checkpoint(file);
    if (o->common.json) {
      std::cout << inspect_report_json(report).dump(2) << "\n";
    } else {
      std::cout << format_inspect_report(report);
    }
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
      "convert", "store a checkpoint's Linear/Conv2d weights in FP8 (UNet and text encoders), or all of it in FP16/BF16");
  add_common_options(*sub, o->common, true);
  sub->add_option("--model", o->model, "source checkpoint (.safetensors, 16/32-bit)")->required();
  sub->add_option("--weights", o->weights, "fp8-e4m3 or fp8-e5m2; fp16 or bf16: every float tensor")
      ->required()
      ->check(CLI::IsMember({"fp8-e4m3", "fp8-e5m2", "fp16", "bf16"}));
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
