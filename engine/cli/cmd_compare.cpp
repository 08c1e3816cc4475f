// compare: one generation in several storage modes with memory, time and fidelity figures.
// bench --section generate: step times of the modes, alternated over repeats.
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "pipeline/family.h"
#include "compare/compare.h"
#include "core/error.h"
#include "core/logging.h"

namespace fp8s::cli {

void register_compare(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    ModelFlags m;
    std::string outdir = "outputs", modes = "fp16,fp8-e4m3";
    GenerationRequest r;
    RequestFlags flags;
    bool no_unet_error = false, retention_only = false;
    std::vector<std::string> loras;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("compare", "the same image in several storage modes: memory, time, PSNR/SSIM, heat map");
  add_common_options(*sub, o->common, true);
  add_model_options(*sub, o->m, true);
  auto* modes = sub->add_option("--modes", o->modes, "storage modes, e.g. fp16,fp8-e4m3,fp8-e4m3/channel (default: the model family's; Flux: fp16,fp8-e4m3,fp8-e5m2)")
                    ->capture_default_str();
  sub->add_option("--outdir", o->outdir, "a new compare-NNNNN folder is made in it")->capture_default_str();
  sub->add_flag("--no-unet-error", o->no_unet_error, "skip the UNet output error against fp32 storage");
  sub->add_option("--lora", o->loras, "FILE[:MULT]: apply a LoRA and report its retention per mode")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("--retention-only", o->retention_only, "only the LoRA retention table (no images)");
  add_request_options(*sub, o->r, o->flags);
  sub->callback([o, modes] {
    CompareOptions c;
    c.load = load_options(o->m);
    // the family's comparison (Flux: E4M3 against E5M2 and FP16) and sampler defaults
    const FamilyTraits family = family_traits_of(c.load.checkpoint);
    if (modes->count() == 0) o->modes = family.compare_modes;
    finish_request(o->r, o->flags, {WeightType::FP16, Fp8Scale::None, false}, &family);
    c.request = o->r;
    c.modes = parse_modes(o->modes, o->r.storage.scale);
    c.outdir = o->outdir;
    c.unet_error = !o->no_unet_error && family.fp32_probe;
    c.request.loras = parse_lora_flags(o->loras);
    c.retention_only = o->retention_only;
    if (c.retention_only && c.request.loras.empty()) throw InputError("--retention-only needs --lora");
    c.cancel = &install_interrupt();
    const auto report = run_compare(c, [](const std::string& s) { log().info("{}", s); });
    if (o->common.json) {
      std::ifstream f(report.folder + "/report.json");
      std::cout << f.rdbuf();
    } else {
      std::ifstream f(report.folder + "/report.md");
      std::cout << f.rdbuf() << "\nfiles in " << report.folder << "\n";
    }
  });
}

std::function<void(bool json)> register_bench_generate(CLI::App& bench) {
  struct Opts {
    ModelFlags m;
    std::string modes = "bf16,fp8-e4m3";
    GenerationRequest r;
    RequestFlags flags;
    int repeats = 3;
    bool profile = false;
  };
  auto o = std::make_shared<Opts>();
  o->r.width = o->r.height = 256;
  o->r.steps = 4;
  o->r.seed = 1;
  add_model_options(bench, o->m, false);
  bench.add_option("--modes", o->modes, "storage modes for --section generate")->capture_default_str();
  bench.add_option("--repeat", o->repeats, "measured rounds (after one warm-up round)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  bench.add_flag("--profile", o->profile, "also time each kind of op (conv, linear, attention, norms, casts, FP8 decode)");
  add_request_options(bench, o->r, o->flags);
  return [o, &bench](bool json) {
    if (o->m.model.empty()) {  // the demo model at its own size unless one is asked for
      if (bench.count("--width") == 0) o->r.width = 0;
      if (bench.count("--height") == 0) o->r.height = 0;
    }
    BenchOptions b;
    b.load = load_options(o->m);
    const FamilyTraits family = family_traits_of(b.load.checkpoint);
    finish_request(o->r, o->flags, {WeightType::FP16, Fp8Scale::None, false}, &family);
    b.request = o->r;
    b.modes = parse_modes(o->modes, o->r.storage.scale);
    b.repeats = o->repeats;
    b.profile = o->profile;
    b.cancel = &install_interrupt();
    const auto modes = run_bench(b, [](const std::string& s) { log().info("{}", s); });
    if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& m : modes) {
        j.push_back({{"mode", m.mode.label()}, {"step_ms", m.step_ms}, {"median_ms", m.median_ms},
                     {"min_ms", m.min_ms}, {"max_ms", m.max_ms}, {"ratio_to_first", m.ratio_to_first},
                     {"run_median_ms", m.run_median_ms}, {"decode_gb_per_s", m.decode_gb_per_s},
                     {"decode_share", m.decode_share}, {"weight_bytes", m.weight_bytes},
                     {"tracked_peak_bytes", m.tracked_peak_bytes}, {"vram_peak_bytes", m.vram_peak_bytes},
                     {"conv_layout", m.conv_layout}, {"attention_kernel", m.attention_kernel},
                     {"device", b.device}});
      }
      std::cout << nlohmann::json{{"generate", j}}.dump(2) << "\n";
    } else {
      std::cout << bench_markdown(b, modes);
    }
  };
}

}  // namespace fp8s::cli
