// generate: prompt -> PNG files, with progress on stderr and an optional JSON report.
#include <filesystem>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "core/error.h"
#include "pipeline/family.h"
#include "models/inspect.h"
#include "core/logging.h"
#include "io/control_image.h"
#include "pipeline/engine.h"

namespace fp8s::cli {
namespace {

// Progress bar over all steps of all images.
class CliObserver : public Observer {
 public:
  CliObserver(int steps_per_image, int images) : total_(steps_per_image * images), per_image_(steps_per_image) {}
  void onStep(const StepEvent& e) override {
    if (bar_) bar_->update(static_cast<std::size_t>(e.image_index * per_image_ + e.step));
  }
  void onPhase(const PhaseEvent& e) override {
    if (e.phase == Phase::Sample && !bar_) {
      bar_ = std::make_unique<ProgressPrinter>("sampling", static_cast<std::size_t>(total_), "it");
    }
    if (e.phase == Phase::Done && bar_) bar_->finish(), bar_.reset();
  }

 private:
  int total_, per_image_;
  std::unique_ptr<ProgressPrinter> bar_;
};

struct GenerateOptions {
  CommonOptions common;
  ModelFlags m;
  std::string outdir = "outputs";
  std::vector<std::string> loras;
  GenerationRequest r;
  RequestFlags flags;
};

// --save-hint: the control hint the first pass of ControlNet unit 0 sees (never over a file).
void save_hint(const GenerateOptions& o, const FamilyTraits& family) {
  const std::string& path = o.flags.control.save_hint;
  if (std::filesystem::exists(path)) {
    throw InputError("--save-hint " + path + " exists; choose another file name (nothing is overwritten)");
  }
  const auto& u = o.r.controlnets.front();
  const int w = request_width(o.r, family.native_size, family.size_multiple, family.min_size);
  const int h = request_height(o.r, family.native_size, family.size_multiple, family.min_size);
  write_png(path, control_hint(*u.image, w, h, u.resize, u.preprocessor, u.canny_low, u.canny_high), "");
  log().info("wrote the control hint ({}x{}, {}) to {}", w, h, control_preprocessor_name(u.preprocessor), path);
}

// The run's figures (--json), and the log's summary of time, memory and streaming.
nlohmann::json generation_report(const GenerationResult& result, const ModelInfo& info, const StorageSpec& storage) {
  const auto& t = result.timing;
  nlohmann::json report{{"images", nlohmann::json::array()}};
  report["timing"] = {{"load_ms", t.load_ms},   {"encode_ms", t.encode_ms}, {"step_ms", t.step_ms},
                      {"denoise_ms", t.denoise_ms}, {"decode_ms", t.decode_ms}, {"total_ms", t.total_ms}};
  report["weight_bytes"] = result.weight_bytes;
  report["storage"] = storage_display_name(storage);
  report["conv_layout"] = result.conv_layout;
  report["attention_kernel"] = result.attention_kernel;
  report["rss_peak_bytes"] = result.rss_peak_bytes;
  report["device"] = info.device;
  report["streaming"] = {{"blocks", info.blocks},
                         {"streamed_blocks", info.streamed_blocks},
                         {"resident_block_bytes", info.resident_block_bytes},
                         {"streamed_block_bytes", info.streamed_block_bytes},
                         {"streamed_bytes", result.streamed_bytes},
                         {"read_ms", result.stream_read_ms},
                         {"transfer_wait_ms", result.transfer_wait_ms}};
  if (info.gpu) {
    report["vram_peak_bytes"] = result.vram_peak_bytes;
    report["vram_reserved_peak_bytes"] = result.vram_reserved_peak_bytes;
  }
  log().info("{} image(s) in {:.1f} s (load {:.1f} s), peak RSS {:.0f} MB", result.images.size(),
             t.total_ms / 1000, t.load_ms / 1000, result.rss_peak_bytes / 1e6);
  if (info.streamed_blocks > 0) {
    const double steps = std::max<double>(1, static_cast<double>(t.step_ms.size()));
    log().info("streamed {:.2f} GB a step at {:.2f} GB/s, waiting {:.0f} ms a step for transfers ({})",
               result.streamed_bytes / 1e9 / steps,
               result.stream_read_ms > 0 ? result.streamed_bytes / 1e6 / result.stream_read_ms : 0.0,
               result.transfer_wait_ms / steps, info.residency);
  }
  if (info.gpu) {
    log().info("peak VRAM {:.0f} MB allocated, {:.0f} MB reserved on {}", result.vram_peak_bytes / 1e6,
               result.vram_reserved_peak_bytes / 1e6, info.device);
  }
  return report;
}

}  // namespace

void register_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = app.add_subcommand("generate", "text to image: writes numbered PNG files");
  add_common_options(*sub, o->common, true);
  add_model_options(*sub, o->m, true);
  sub->add_option("--outdir", o->outdir, "output folder (files are never overwritten)")->capture_default_str();
  add_request_options(*sub, o->r, o->flags);
  sub->add_option("--lora", o->loras, "FILE[:MULT]: apply a LoRA (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->callback([o] {
    o->r.loras = parse_lora_flags(o->loras);
    LoadOptions load = load_options(o->m);
    const FamilyTraits family = family_traits_of(load.checkpoint);
    finish_request(o->r, o->flags, auto_storage_for(load.checkpoint), &family);
    load.storage = o->r.storage;
    // before the model loads: an output folder that cannot take files is an error now, not after sampling
    check_writable_folder(o->outdir);
    const std::atomic<bool>& g_cancel = install_interrupt();
    Engine engine(load);
    engine.validate(o->r);
    if (!o->flags.control.save_hint.empty() && !o->r.controlnets.empty()) save_hint(*o, family);
    if (g_cancel.load()) throw Cancelled();
    CliObserver observer(o->r.steps, o->r.batch_count);
    auto result = engine.generate(o->r, &observer, g_cancel);
    std::vector<std::pair<std::string, uint64_t>> written;
    for (const auto& img : result.images) {
      // each file is whole or absent (written to a temporary name, renamed); stop between files
      if (g_cancel.load()) throw Cancelled();
      written.emplace_back(write_numbered_png(o->outdir, img.seed, img.image, img.parameters), img.seed);
      if (!o->common.json) std::cout << written.back().first << "\n";
    }
    auto report = generation_report(result, engine.info(), o->r.storage);
    for (const auto& [path, seed] : written) report["images"].push_back({{"path", path}, {"seed", seed}});
    if (o->common.json) std::cout << report.dump(2) << "\n";
  });
}

}  // namespace fp8s::cli
