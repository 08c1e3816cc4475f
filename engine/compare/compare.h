// `compare` and `bench`: the same generation in several storage modes, one process, one mode
// after the other (each mode's weights released before the next are loaded), with memory, time
// and fidelity figures and the files that show them.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/op_profile.h"
#include "pipeline/engine.h"

namespace fp8s {

double median(std::vector<double> values);  // 0 for none
// ‖a − ref‖ / ‖ref‖ (the UNet output error figures)
double rel_l2(const std::vector<float>& a, const std::vector<float>& ref);

struct ModeSpec {
  StorageSpec storage;
  bool fp8_compute = false;   // GenerationRequest::fp8_compute
  std::optional<uint64_t> weight_budget;  // GenerationRequest::weight_budget (unset: auto)
  std::string budget_text;    // as given ("8G")
  std::string label() const;  // "fp16", "fp8-e4m3", "fp8-e4m3/tensor", "fp16@8G"
};
// Parses "fp16,fp8-e4m3,fp8-e4m3/channel,fp16@8G" (a /SCALE suffix overrides the default scale; a
// "+fp8-compute" suffix asks for FP8 compute; "@SIZE" a weight budget, models/streaming.h).
std::vector<ModeSpec> parse_modes(const std::string& list, Fp8Scale default_scale);

struct CompareOptions {
  LoadOptions load;
  GenerationRequest request;  // its storage is replaced by each mode's
  std::vector<ModeSpec> modes;
  std::string outdir;         // a new compare-NNNNN folder is made inside
  bool unet_error = true;     // also measure the UNet output error vs FP32 storage
  bool retention_only = false;  // only the LoRA retention table (no images)
  const std::atomic<bool>* cancel = nullptr;  // run_compare's: Cancelled at the engine's next cancel point
};

// How much of a LoRA's effect survives a storage type and LoRA mode:
// ‖f(x; W_fmt + LoRA) − f(x; W_fmt)‖ / ‖f(x; W_fp16 + LoRA) − f(x; W_fp16)‖ on the UNet output.
struct RetentionRow {
  std::string mode;
  std::string lora_mode;
  double retention = 0;  // ‖Δ_fmt‖ / ‖Δ_fp16‖ (issue 5's metric)
  double strength = 0;   // ⟨Δ_fmt, Δ_fp16⟩ / ‖Δ_fp16‖²: the part of the effect along the FP16 one
};

struct ModeResult {
  ModeSpec mode;
  std::string refused;  // the mode cannot run here (DoesNotFit: its memory estimate); no result then
  GenerationResult result;
  std::string image_file;
  double step_ms_mean = 0, step_ms_median = 0;
  double psnr = 0, ssim = 1;  // versus the first mode
  int max_abs_diff = 0;
  double unet_rel_l2 = -1;    // versus FP32 storage (-1: not measured)
  // Peak memory saved per weight byte saved, versus the first mode (peak VRAM on a GPU, peak
  // tracked tensor bytes on the CPU); unset where the weights are the same size.
  std::optional<double> drop_per_weight_byte;
  // the denoiser's residency under the mode's weight budget (ModelInfo)
  int streamed_blocks = 0;
  uint64_t resident_block_bytes = 0;
  std::string residency;
};

struct CompareReport {
  std::string folder;           // where write_compare put the files (empty until then)
  std::string model;            // the checkpoint
  GenerationRequest request;    // as run (seed resolved; storage: the last mode's)
  std::vector<ModeResult> modes;
  std::vector<RetentionRow> retention;  // when the request has LoRAs
  std::string source_note;              // the checkpoint is already FP8 (ModelInfo::source_note)
  std::string device;                   // ModelInfo::device
  bool gpu = false;                     // peaks are VRAM (CUDA allocator) as well as host memory
};

// What a front end sees of a compare while it runs (all optional).
struct CompareHooks {
  std::function<void(const std::string&)> progress;
  std::function<Observer*(std::size_t mode)> observer;  // the engine's events of mode k's generation
  std::function<void(std::size_t mode, const ModeResult&)> mode_finished;
  const std::atomic<bool>* cancel = nullptr;            // Cancelled is thrown at the next step
};

// Runs every mode on an open engine (LoRA retention when the request has LoRAs, the generations,
// the metrics against the first mode, the UNet error against FP32 storage) and writes nothing.
// Each mode's memory figures are its own: the heap is trimmed and the RSS high-water mark reset
// after its weights are loaded (GenerationResult::rss_peak_is_per_request says whether the kernel
// allowed the reset).
CompareReport measure_compare(Engine& engine, const CompareOptions& options, const CompareHooks& hooks = {});
// Writes <folder>/<mode>.png, side_by_side.png, diff_heatmap.png (and diff_heatmap_<mode>.png for
// further modes), report.json and report.md into `folder` (created if missing); sets report.folder.
void write_compare(CompareReport& report, const std::string& folder);
// The CLI's compare: loads the checkpoint, measure_compare, write_compare into a new
// <outdir>/compare-NNNNN folder.
CompareReport run_compare(const CompareOptions& options,
                          const std::function<void(const std::string&)>& progress = {});

struct BenchOptions {
  LoadOptions load;
  GenerationRequest request;
  std::vector<ModeSpec> modes;
  int repeats = 3;
  bool profile = false;  // time per op kind in the measured runs (OpProfile)
  const std::atomic<bool>* cancel = nullptr;  // Cancelled at the engine's next cancel point
  std::string device;  // filled by run_bench: ModelInfo::device
  bool gpu = false;
};

struct BenchMode {
  ModeSpec mode;
  std::vector<double> step_ms;          // every step of every measured run
  std::vector<double> run_median_ms;    // per run
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double ratio_to_first = 1;            // median step time / the first mode's
  double decode_gb_per_s = 0;           // FP8 decode throughput (codes in)
  double decode_share = 0;              // decode time / step time
  uint64_t weight_bytes = 0, tracked_peak_bytes = 0;
  uint64_t vram_peak_bytes = 0;         // on a GPU: the CUDA allocator's peak over the runs
  std::string conv_layout, attention_kernel;  // what ran (GenerationResult's)
  OpProfile profile;                    // summed over the measured runs' steps (BenchOptions::profile)
};

// Runs every mode once as warm-up (excluded), then `repeats` rounds alternating A B A B.
std::vector<BenchMode> run_bench(BenchOptions& options,
                                 const std::function<void(const std::string&)>& progress = {});
std::string bench_markdown(const BenchOptions& options, const std::vector<BenchMode>& modes);

}  // namespace fp8s
