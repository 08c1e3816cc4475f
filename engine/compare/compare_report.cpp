// compare's files: each mode's image, the side-by-side and difference images, report.json and
// report.md (the one place the compare table is written, for the CLI and the GUI's Export).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compare/compare.h"
#include "compare/report_format.h"
#include "core/error.h"
#include "io/image_metrics.h"
#include "io/png.h"

namespace fp8s {
namespace {

using report::fmt;
using report::mb;

void write_text(const std::string& path, const std::string& text) {
  const std::string temp = path + ".partial";
  {
    std::ofstream f(temp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.flush()) throw RuntimeFailure("writing " + path + " failed");
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) throw RuntimeFailure("cannot write " + path);
}

std::string file_label(const ModeSpec& m) {
  std::string s = m.label();
  std::replace(s.begin(), s.end(), '/', '-');
  return s;
}

bool ran(const ModeResult& m) { return m.refused.empty(); }

// The LoRA retention table (report.md's section, report.json's "retention").
std::string retention_section(const CompareReport& report, nlohmann::json& retention) {
  retention = nlohmann::json::array();
  if (report.retention.empty()) return {};
  std::ostringstream rmd;
  rmd << "\n## LoRA retention (the denoiser network's output; FP32 compute)\n\n| storage | LoRA mode | retention ‖Δ‖ ratio | strength along FP16 Δ |\n|---|---|---|---|\n";
  for (const auto& r : report.retention) {
    retention.push_back({{"mode", r.mode}, {"lora_mode", r.lora_mode}, {"retention", r.retention}, {"strength", r.strength}});
    rmd << "| " << r.mode << " | " << r.lora_mode << " | " << fmt(r.retention, 4) << " | " << fmt(r.strength, 4) << " |\n";
  }
  return rmd.str();
}

// Each mode's image (named after its mode; a mode listed twice numbered), the difference heatmaps
// against `first` and the side-by-side.
void write_images(CompareReport& report, const RgbImage& first) {
  std::vector<RgbImage> images;
  std::vector<std::string> labels;
  std::size_t compared = 0;
  for (std::size_t k = 0; k < report.modes.size(); ++k) {
    auto& m = report.modes[k];
    if (!ran(m)) continue;
    m.image_file = file_label(m.mode) + ".png";
    for (int n = 2; std::any_of(report.modes.begin(), report.modes.begin() + static_cast<std::ptrdiff_t>(k),
                                [&](const ModeResult& o) { return o.image_file == m.image_file; }); ++n) {
      m.image_file = file_label(m.mode) + "-" + std::to_string(n) + ".png";  // the same mode listed twice
    }
    const auto& img = m.result.images.front();
    write_png(report.folder + "/" + m.image_file, img.image, img.parameters);
    images.push_back(img.image);
    labels.push_back(m.mode.label());
    if (compared >= 1) {
      const std::string name = compared == 1 ? "diff_heatmap.png" : "diff_heatmap_" + file_label(m.mode) + ".png";
      write_png(report.folder + "/" + name, diff_heatmap(first, img.image), "");
    }
    ++compared;
  }
  write_png(report.folder + "/side_by_side.png", side_by_side(images, labels), "");
}

double per_step(const ModeResult& m, double v) {
  const auto steps = m.result.timing.step_ms.size();
  return steps == 0 ? 0.0 : v / static_cast<double>(steps);
}

nlohmann::json mode_json(const ModeResult& m) {
  const auto& r = m.result;
  return {{"mode", m.mode.label()},
          {"image", m.image_file},
          {"weight_bytes", {{"unet", r.unet_bytes}, {"text", r.text_bytes}, {"vae", r.vae_bytes}, {"controlnet", r.control_bytes},
                            {"total", r.weight_bytes}}},
          {"peak_tracked_bytes", r.tracked_peak_bytes},
          {"peak_rss_bytes", r.rss_peak_bytes},
          {"peak_rss_is_per_mode", r.rss_peak_is_per_request},
          {"peak_vram_bytes", r.vram_peak_bytes},
          {"peak_vram_reserved_bytes", r.vram_reserved_peak_bytes},
          {"peak_vram_used_bytes", r.vram_used_peak_bytes},
          {"peak_drop_per_weight_byte_saved", m.drop_per_weight_byte ? nlohmann::json(*m.drop_per_weight_byte) : nlohmann::json(nullptr)},
          {"streaming", {{"resident_block_bytes", m.resident_block_bytes},
                         {"streamed_bytes", r.streamed_bytes},
                         {"streamed_bytes_per_step", per_step(m, r.streamed_bytes)},
                         {"read_ms", r.stream_read_ms},
                         {"transfer_wait_ms_per_step", per_step(m, r.transfer_wait_ms)}}},
          {"step_ms", r.timing.step_ms},
          {"step_ms_mean", m.step_ms_mean},
          {"step_ms_median", m.step_ms_median},
          {"total_ms", r.timing.total_ms},
          {"psnr_db_vs_first", std::isinf(m.psnr) ? nlohmann::json("inf") : nlohmann::json(m.psnr)},
          {"ssim_vs_first", m.ssim},
          {"max_abs_diff_vs_first", m.max_abs_diff},
          {"unet_rel_l2_vs_fp32", m.unet_rel_l2},
          {"conv_layout", r.conv_layout},
          {"attention_kernel", r.attention_kernel}};
}

std::string mode_row(const ModeResult& m, bool control, bool gpu) {
  const auto& r = m.result;
  std::ostringstream md;
  md << "| " << m.mode.label() << " | " << mb(r.unet_bytes) << " | " << mb(r.text_bytes) << " | " << mb(r.vae_bytes)
     << (control ? " | " + mb(r.control_bytes) : std::string()) << " | " << mb(r.weight_bytes) << " | " << mb(r.tracked_peak_bytes) << " | " << mb(r.rss_peak_bytes) << " | "
     << (gpu ? mb(r.vram_peak_bytes) + " | " + mb(r.vram_reserved_peak_bytes) + " | " : std::string())
     << (m.drop_per_weight_byte ? fmt(100 * *m.drop_per_weight_byte, 1) + "%" : std::string("-"))
     << " | " << (m.streamed_blocks ? mb(m.resident_block_bytes) : std::string("all"))
     << " | " << (m.streamed_blocks ? mb(static_cast<uint64_t>(per_step(m, r.streamed_bytes))) : std::string("-"))
     << " | " << (m.streamed_blocks ? fmt(per_step(m, r.transfer_wait_ms), 0) : std::string("-"))
     << " | " << fmt(m.step_ms_mean, 0) << " | " << fmt(m.step_ms_median, 0) << " | " << fmt(r.timing.total_ms, 0) << " | "
     << fmt(m.psnr) << " | " << fmt(m.ssim, 4) << " | " << m.max_abs_diff << " | "
     << (m.unet_rel_l2 < 0 ? std::string("-") : fmt(m.unet_rel_l2, 5)) << " | " << r.conv_layout << " | "
     << r.attention_kernel << " |\n";
  return md.str();
}

// report.md's opening: the request in a sentence, the note, the device and the table's head.
std::string md_head(const CompareReport& report, const RgbImage& first, const ModeResult& ref, bool control) {
  const GenerationRequest& request = report.request;
  std::ostringstream md;
  md << "# FP8 Studio compare\n\n" << "Model `" << report.model << "`, " << first.width << "x" << first.height
     << ", " << request.steps << " steps " << sampler_display_name(request.sampler) << ", CFG " << request.cfg
     << ", seed " << request.seed << ", compute " << compute_type_name(request.compute) << "."
     << (request.init_image ? std::string(request.mask ? " Inpainting" : " img2img") + " from a " +
                                  std::to_string(request.init_image->width) + "x" + std::to_string(request.init_image->height) +
                                  " init image, denoising strength " + fmt(request.denoising_strength) + " (the last " +
                                  std::to_string(ref.result.timing.step_ms.size()) +
                                  " steps of the schedule)."
                            : std::string())
     << (request.enable_hr ? " Hires fix: " + std::to_string(request.hr_target_width(request.width)) + "x" +
                                 std::to_string(request.hr_target_height(request.height)) + " (" +
                                 hr_upscaler_display_name(request.hr_upscaler) + "), " +
                                 std::to_string(request.hr_steps ? request.hr_steps : request.steps) +
                                 " steps at denoising strength " + fmt(request.hr_denoising_strength) + "; the step times cover both passes."
                           : std::string())
     << "\n\n"
     << (report.source_note.empty() ? "" : "**Note:** " + report.source_note + ".\n\n")
     << "Device: " << report.device << ".\n\n"
     << "| mode | UNet MB | text MB | VAE MB |" << (control ? " ControlNet MB |" : "") << " weights MB | peak tracked MB | peak RSS MB (this mode) |"
     << (report.gpu ? " peak VRAM MB | peak VRAM reserved MB |" : "")
     << " peak drop / weight byte saved | resident blocks MB | streamed MB / step | transfer wait ms / step | step ms (mean) | step ms (median) | total ms | PSNR dB | SSIM | max abs diff | UNet rel. L2 vs fp32 | conv weights | attention |\n"
     << "|---|---|---|---|---|---|---|" << (control ? "---|" : "") << (report.gpu ? "---|---|" : "") << "---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  return md.str();
}

// report.md's closing notes: what the image metrics and the peaks mean.
std::string md_notes(bool per_mode_rss, bool gpu) {
  std::ostringstream md;
  md << "\nPSNR, SSIM (luminance, 11x11 Gaussian window) and max abs diff are against the first mode that ran. "
     << (per_mode_rss ? "Peak RSS is each mode's own: the modes run one after the other in this process, and before each "
                        "mode's generation (its weights loaded, the previous mode's released) the heap is trimmed and the "
                        "resident high-water mark reset, so it shows what that mode needs. "
                      : "Peak RSS is the process's high-water mark across the modes: this kernel did not let it be reset "
                        "between them, so later modes include earlier ones' peaks. ")
     << "Peak drop per weight byte saved: how much of the smaller weights shows in the peak "
     << (gpu ? "VRAM (CUDA allocator, allocated bytes)" : "tracked tensor memory") << ", against the first mode.\n\n"
     << "![side by side](side_by_side.png)\n\n![difference](diff_heatmap.png)\n";
  return md.str();
}

}  // namespace

void write_compare(CompareReport& report, const std::string& folder) {
  make_dirs(folder);
  report.folder = folder;
  const GenerationRequest& request = report.request;
  nlohmann::json retention;
  const std::string retention_md = retention_section(report, retention);
  if (report.modes.empty()) {  // retention only
    write_text(report.folder + "/report.json", nlohmann::json{{"model", report.model}, {"retention", retention}}.dump(2) + "\n");
    write_text(report.folder + "/report.md", "# FP8 Studio compare\n" + retention_md);
    return;
  }
  // the reference: the first mode that ran (a mode that cannot fit here has no image)
  const auto ref = std::find_if(report.modes.begin(), report.modes.end(), ran);
  const auto& first = ref->result.images.front().image;
  write_images(report, first);
  nlohmann::json j{{"model", report.model},
                   {"prompt", request.prompt},
                   {"negative", request.negative},
                   {"seed", request.seed},
                   {"steps", request.steps},
                   {"size", std::to_string(first.width) + "x" + std::to_string(first.height)},
                   {"sampler", sampler_name(request.sampler)},
                   {"img2img", request.init_image.has_value()},
                   {"inpainting", request.mask.has_value()},
                   {"denoising_strength", request.denoising_strength},
                   {"hires", request.enable_hr},
                   {"compute", compute_type_name(request.compute)},
                   {"source_note", report.source_note},
                   {"device", report.device},
                   {"modes", nlohmann::json::array()}};
  const bool per_mode_rss = std::all_of(report.modes.begin(), report.modes.end(),
                                        [&](const ModeResult& m) { return !ran(m) || m.result.rss_peak_is_per_request; });
  const bool control = std::any_of(report.modes.begin(), report.modes.end(),
                                   [&](const ModeResult& m) { return ran(m) && m.result.control_bytes > 0; });
  std::string md = md_head(report, first, *ref, control);
  std::string refused;
  for (const auto& m : report.modes) {
    if (!ran(m)) {
      j["modes"].push_back({{"mode", m.mode.label()}, {"refused", m.refused}});
      refused += "- **" + m.mode.label() + "** did not run: " + m.refused + "\n";
      continue;
    }
    j["modes"].push_back(mode_json(m));
    md += mode_row(m, control, report.gpu);
  }
  if (!refused.empty()) md += "\n" + refused;
  md += md_notes(per_mode_rss, report.gpu) + retention_md;
  j["retention"] = retention;
  write_text(report.folder + "/report.json", j.dump(2) + "\n");
  write_text(report.folder + "/report.md", md);
}

}  // namespace fp8s
