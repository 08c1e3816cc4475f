#include "compare/compare.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "compare/image_metrics.h"
#include "core/error.h"
#include "io/png.h"
#include "models/nn.h"

namespace fp8s {
namespace {

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

std::string make_run_folder(const std::string& outdir) {
  make_dirs(outdir);
  for (int n = 1; n < 100000; ++n) {
    char name[32];
    std::snprintf(name, sizeof name, "/compare-%05d", n);
    const std::string path = outdir + name;
    if (::mkdir(path.c_str(), 0755) == 0) return path;
    if (errno != EEXIST) throw InputError("cannot create " + path + " (" + std::strerror(errno) + ")");
  }
  throw InputError(outdir + ": no free compare-NNNNN folder name");
}

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

std::string mb(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", bytes / 1e6);
  return b;
}

std::string fmt(double v, int digits = 2) {
  if (std::isinf(v)) return "inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

}  // namespace

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string ModeSpec::label() const {
  std::string s = weight_type_name(storage.weights);
  if (is_fp8(storage.weights) && storage.scale != Fp8Scale::None) s += std::string("/") + fp8_scale_name(storage.scale);
  if (storage.fp8_vae) s += "+vae";
  if (fp8_compute) s += "+fp8-compute";
  return s;
}

std::vector<ModeSpec> parse_modes(const std::string& list, Fp8Scale default_scale) {
  std::vector<ModeSpec> modes;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    ModeSpec m;
    // "fp8-e4m3+fp8-compute": FP8 storage with the Linear layers through _scaled_mm (CUDA 8.9+)
    const std::string suffix = "+fp8-compute";
    if (item.size() > suffix.size() && item.compare(item.size() - suffix.size(), suffix.size(), suffix) == 0) {
      m.fp8_compute = true;
      item.resize(item.size() - suffix.size());
    }
    const auto slash = item.find('/');
    const std::string weights = item.substr(0, slash);
    const auto w = parse_weight_type(weights);
    if (!w) throw InputError("mode '" + item + "': unknown storage '" + weights + "' (fp32, fp16, bf16, fp8-e4m3, fp8-e5m2)");
    m.storage.weights = *w;
    m.storage.scale = is_fp8(*w) ? default_scale : Fp8Scale::None;
    if (slash != std::string::npos) {
      const auto s = parse_fp8_scale(item.substr(slash + 1));
      if (!s) throw InputError("mode '" + item + "': unknown FP8 scale (none, tensor, channel)");
      m.storage.scale = *s;
    }
    modes.push_back(m);
  }
  if (modes.empty()) throw InputError("--modes lists no storage modes");
  return modes;
}

CompareReport run_compare(const CompareOptions& o, const std::function<void(const std::string&)>& progress) {
  CompareReport report;
  GenerationRequest request = o.request;
  if (request.seed < 0) request.seed = static_cast<int64_t>(std::random_device{}() & 0xFFFFFFFFu);
  LoadOptions load = o.load;
  load.storage = o.modes.front().storage;
  Engine engine(load);
  engine.validate(request);
  report.source_note = engine.info().source_note;  // logged once by the model
  report.device = engine.info().device;
  report.gpu = engine.info().gpu;
  report.folder = make_run_folder(o.outdir);
  std::atomic<bool> never{false};
  if (!request.loras.empty()) {
    if (progress) progress("measuring LoRA retention");
    const int latent = std::max(8, request.height / 8 / 2);
    const auto seed = static_cast<uint64_t>(request.seed);
    auto norm_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
      double s = 0;
      for (std::size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      return std::sqrt(s);
    };
    auto minus = [](std::vector<float> a, const std::vector<float>& b) {
      for (std::size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
      return a;
    };
    StorageSpec fp16{WeightType::FP16, Fp8Scale::None, false};
    const auto ref_delta =
        minus(engine.unet_probe(fp16, ComputeType::FP32, seed, latent, request.loras, LoraMode::Merge),
              engine.unet_probe(fp16, ComputeType::FP32, seed, latent));
    const double reference = norm_diff(ref_delta, std::vector<float>(ref_delta.size(), 0.0f));
    for (const auto& mode : o.modes) {
      const auto base = engine.unet_probe(mode.storage, ComputeType::FP32, seed, latent);
      for (auto lm : {LoraMode::Merge, LoraMode::MergeStochastic, LoraMode::Online}) {
        if (!is_fp8(mode.storage.weights) && lm == LoraMode::MergeStochastic) continue;
        const auto with = engine.unet_probe(mode.storage, ComputeType::FP32, seed, latent, request.loras, lm);
        const auto delta = minus(with, base);
        double dot = 0;
        for (std::size_t i = 0; i < delta.size(); ++i) dot += double(delta[i]) * ref_delta[i];
        const double ref2 = std::max(reference * reference, 1e-30);
        report.retention.push_back({mode.label(), lora_mode_name(lm), norm_diff(with, base) / std::max(reference, 1e-30), dot / ref2});
      }
    }
  }
  for (const auto& mode : o.modes) {
    if (o.retention_only) break;
    if (progress) progress("generating with " + mode.label());
    request.storage = mode.storage;
    request.fp8_compute = mode.fp8_compute;
    ModeResult m;
    m.mode = mode;
    m.result = engine.generate(request, nullptr, never);
    m.step_ms_mean = mean(m.result.timing.step_ms);
    m.step_ms_median = median(m.result.timing.step_ms);
    m.image_file = file_label(mode) + ".png";
    for (int n = 2; std::any_of(report.modes.begin(), report.modes.end(), [&](const ModeResult& o) { return o.image_file == m.image_file; }); ++n) {
      m.image_file = file_label(mode) + "-" + std::to_string(n) + ".png";  // the same mode listed twice
    }
    write_png(report.folder + "/" + m.image_file, m.result.images.front().image,
              m.result.images.front().parameters);
    report.modes.push_back(std::move(m));
  }
  nlohmann::json retention = nlohmann::json::array();
  std::ostringstream rmd;
  if (!report.retention.empty()) {
    rmd << "\n## LoRA retention (UNet output, FP32 compute)\n\n| storage | LoRA mode | retention ‖Δ‖ ratio | strength along FP16 Δ |\n|---|---|---|---|\n";
    for (const auto& r : report.retention) {
      retention.push_back({{"mode", r.mode}, {"lora_mode", r.lora_mode}, {"retention", r.retention}, {"strength", r.strength}});
      rmd << "| " << r.mode << " | " << r.lora_mode << " | " << fmt(r.retention, 4) << " | " << fmt(r.strength, 4) << " |\n";
    }
  }
  if (o.retention_only) {
    write_text(report.folder + "/report.json", nlohmann::json{{"model", o.load.checkpoint}, {"retention", retention}}.dump(2) + "\n");
    write_text(report.folder + "/report.md", "# FP8 Studio compare\n" + rmd.str());
    return report;
  }
  const auto& first = report.modes.front().result.images.front().image;
  std::vector<RgbImage> images;
  std::vector<std::string> labels;
  for (std::size_t k = 0; k < report.modes.size(); ++k) {
    auto& m = report.modes[k];
    const auto& img = m.result.images.front().image;
    m.psnr = psnr(img, first);
    m.ssim = ssim(img, first);
    m.max_abs_diff = max_abs_diff(img, first);
    const auto& r0 = report.modes.front().result;
    const double saved = double(r0.weight_bytes) - double(m.result.weight_bytes);
    if (std::abs(saved) > 0) {
      const double drop = report.gpu ? double(r0.vram_peak_bytes) - double(m.result.vram_peak_bytes)
                                     : double(r0.tracked_peak_bytes) - double(m.result.tracked_peak_bytes);
      m.drop_per_weight_byte = drop / saved;
    }
    images.push_back(img);
    labels.push_back(m.mode.label());
    if (k >= 1) {
      const std::string name = k == 1 ? "diff_heatmap.png" : "diff_heatmap_" + file_label(m.mode) + ".png";
      write_png(report.folder + "/" + name, diff_heatmap(first, img), "");
    }
  }
  write_png(report.folder + "/side_by_side.png", side_by_side(images, labels), "");
  if (o.unet_error) {
    if (progress) progress("measuring the UNet output error against fp32 storage");
    const int latent = std::max(8, request.height / 8 / 2);
    StorageSpec fp32;
    const auto ref = engine.unet_probe(fp32, ComputeType::FP32, static_cast<uint64_t>(request.seed), latent);
    for (auto& m : report.modes) {
      m.unet_rel_l2 = rel_l2(engine.unet_probe(m.mode.storage, ComputeType::FP32, static_cast<uint64_t>(request.seed), latent), ref);
    }
  }
  // report.json and report.md
  nlohmann::json j{{"model", o.load.checkpoint},
                   {"prompt", request.prompt},
                   {"negative", request.negative},
                   {"seed", request.seed},
                   {"steps", request.steps},
                   {"size", std::to_string(first.width) + "x" + std::to_string(first.height)},
                   {"sampler", sampler_name(request.sampler)},
                   {"compute", compute_type_name(request.compute)},
                   {"source_note", report.source_note},
                   {"device", report.device},
                   {"modes", nlohmann::json::array()}};
  std::ostringstream md;
  md << "# FP8 Studio compare\n\n" << "Model `" << o.load.checkpoint << "`, " << first.width << "x" << first.height
     << ", " << request.steps << " steps " << sampler_display_name(request.sampler) << ", CFG " << request.cfg
     << ", seed " << request.seed << ", compute " << compute_type_name(request.compute) << ".\n\n"
     << (report.source_note.empty() ? "" : "**Note:** " + report.source_note + ".\n\n")
     << "Device: " << report.device << ".\n\n"
     << "| mode | UNet MB | text MB | VAE MB | weights MB | peak tracked MB | peak RSS MB |"
     << (report.gpu ? " peak VRAM MB | peak VRAM reserved MB |" : "")
     << " peak drop / weight byte saved | step ms (mean) | step ms (median) | total ms | PSNR dB | SSIM | max abs diff | UNet rel. L2 vs fp32 |\n"
     << "|---|---|---|---|---|---|---|" << (report.gpu ? "---|---|" : "") << "---|---|---|---|---|---|---|---|\n";
  for (const auto& m : report.modes) {
    const auto& r = m.result;
    j["modes"].push_back({{"mode", m.mode.label()},
                          {"image", m.image_file},
                          {"weight_bytes", {{"unet", r.unet_bytes}, {"text", r.text_bytes}, {"vae", r.vae_bytes}, {"total", r.weight_bytes}}},
                          {"peak_tracked_bytes", r.tracked_peak_bytes},
                          {"peak_rss_bytes", r.rss_peak_bytes},
                          {"peak_vram_bytes", r.vram_peak_bytes},
                          {"peak_vram_reserved_bytes", r.vram_reserved_peak_bytes},
                          {"peak_drop_per_weight_byte_saved", m.drop_per_weight_byte ? nlohmann::json(*m.drop_per_weight_byte) : nlohmann::json(nullptr)},
                          {"step_ms", r.timing.step_ms},
                          {"step_ms_mean", m.step_ms_mean},
                          {"step_ms_median", m.step_ms_median},
                          {"total_ms", r.timing.total_ms},
                          {"psnr_db_vs_first", std::isinf(m.psnr) ? nlohmann::json("inf") : nlohmann::json(m.psnr)},
                          {"ssim_vs_first", m.ssim},
                          {"max_abs_diff_vs_first", m.max_abs_diff},
                          {"unet_rel_l2_vs_fp32", m.unet_rel_l2}});
    md << "| " << m.mode.label() << " | " << mb(r.unet_bytes) << " | " << mb(r.text_bytes) << " | " << mb(r.vae_bytes)
       << " | " << mb(r.weight_bytes) << " | " << mb(r.tracked_peak_bytes) << " | " << mb(r.rss_peak_bytes) << " | "
       << (report.gpu ? mb(r.vram_peak_bytes) + " | " + mb(r.vram_reserved_peak_bytes) + " | " : std::string())
       << (m.drop_per_weight_byte ? fmt(100 * *m.drop_per_weight_byte, 1) + "%" : std::string("-"))
       << " | " << fmt(m.step_ms_mean, 0) << " | " << fmt(m.step_ms_median, 0) << " | " << fmt(r.timing.total_ms, 0) << " | "
       << fmt(m.psnr) << " | " << fmt(m.ssim, 4) << " | " << m.max_abs_diff << " | "
       << (m.unet_rel_l2 < 0 ? std::string("-") : fmt(m.unet_rel_l2, 5)) << " |\n";
  }
  md << "\nPSNR, SSIM (luminance, 11x11 Gaussian window) and max abs diff are against the first mode. "
        "Peak RSS is the process's high-water mark (it only falls when the kernel lets it be reset). "
     << "Peak drop per weight byte saved: how much of the smaller weights shows in the peak "
     << (report.gpu ? "VRAM (CUDA allocator, allocated bytes)" : "tracked tensor memory") << ", against the first mode.\n\n"
     << "![side by side](side_by_side.png)\n\n![difference](diff_heatmap.png)\n";
  j["retention"] = retention;
  md << rmd.str();
  write_text(report.folder + "/report.json", j.dump(2) + "\n");
  write_text(report.folder + "/report.md", md.str());
  return report;
}

std::vector<BenchMode> run_bench(BenchOptions& o, const std::function<void(const std::string&)>& progress) {
  LoadOptions load = o.load;
  load.storage = o.modes.front().storage;
  Engine engine(load);
  o.device = engine.info().device;
  o.gpu = engine.info().gpu;
  GenerationRequest request = o.request;
  if (request.seed < 0) request.seed = 1;
  engine.validate(request);
  std::atomic<bool> never{false};
  std::vector<BenchMode> out(o.modes.size());
  std::vector<uint64_t> decode_ns(o.modes.size()), decode_weights(o.modes.size());
  std::vector<double> step_total(o.modes.size());
  for (int round = -1; round < o.repeats; ++round) {
    for (std::size_t k = 0; k < o.modes.size(); ++k) {
      if (progress) progress((round < 0 ? std::string("warm-up ") : "round " + std::to_string(round + 1) + " ") + o.modes[k].label());
      request.storage = o.modes[k].storage;
      request.fp8_compute = o.modes[k].fp8_compute;
      reset_decode_stats();
      // the profile covers the sampling steps only: an observer switches it on at "sample"
      struct ProfileSteps : Observer {
        bool on;
        explicit ProfileSteps(bool o) : on(o) {}
        void onPhase(const PhaseEvent& e) override {
          if (on) set_op_profiling(e.phase == "sample");
        }
      } observer(o.profile && round >= 0);
      reset_op_profile();
      const auto r = engine.generate(request, &observer, never);
      set_op_profiling(false);
      const auto stats = decode_stats();
      if (round < 0) continue;
      if (o.profile) out[k].profile += op_profile();
      auto& m = out[k];
      m.mode = o.modes[k];
      m.step_ms.insert(m.step_ms.end(), r.timing.step_ms.begin(), r.timing.step_ms.end());
      m.run_median_ms.push_back(median(r.timing.step_ms));
      m.weight_bytes = r.weight_bytes;
      m.tracked_peak_bytes = std::max(m.tracked_peak_bytes, r.tracked_peak_bytes);
      m.vram_peak_bytes = std::max(m.vram_peak_bytes, r.vram_peak_bytes);
      decode_ns[k] += stats.nanoseconds;
      decode_weights[k] += stats.weights;
      step_total[k] += std::accumulate(r.timing.step_ms.begin(), r.timing.step_ms.end(), 0.0);
    }
  }
  for (std::size_t k = 0; k < out.size(); ++k) {
    auto& m = out[k];
    m.median_ms = median(m.step_ms);
    m.min_ms = *std::min_element(m.step_ms.begin(), m.step_ms.end());
    m.max_ms = *std::max_element(m.step_ms.begin(), m.step_ms.end());
    m.ratio_to_first = m.median_ms / std::max(1e-9, out.front().median_ms);
    if (decode_ns[k] > 0) {
      m.decode_gb_per_s = decode_weights[k] / (decode_ns[k] / 1e9) / 1e9;
      m.decode_share = decode_ns[k] / 1e6 / std::max(1e-9, step_total[k]);
    }
  }
  return out;
}

std::string bench_markdown(const BenchOptions& o, const std::vector<BenchMode>& modes) {
  std::ostringstream md;
  md << "| mode | median step ms | min-max | ratio to " << modes.front().mode.label()
     << " | per-run medians | FP8 decode GB/s | decode share of step | weights MB | peak tracked MB |"
     << (o.gpu ? " peak VRAM MB |" : "") << "\n"
     << "|---|---|---|---|---|---|---|---|---|" << (o.gpu ? "---|" : "") << "\n";
  for (const auto& m : modes) {
    std::string runs;
    for (double v : m.run_median_ms) runs += (runs.empty() ? "" : ", ") + fmt(v, 0);
    md << "| " << m.mode.label() << " | " << fmt(m.median_ms, 0) << " | " << fmt(m.min_ms, 0) << "-" << fmt(m.max_ms, 0)
       << " | " << fmt(m.ratio_to_first, 3) << " | " << runs << " | " << (m.decode_share > 0 ? fmt(m.decode_gb_per_s) : "-")
       << " | " << (m.decode_share > 0 ? fmt(100 * m.decode_share, 1) + "%" : "-") << " | " << mb(m.weight_bytes)
       << " | " << mb(m.tracked_peak_bytes) << " |" << (o.gpu ? " " + mb(m.vram_peak_bytes) + " |" : "") << "\n";
  }
  md << "\n" << o.repeats << " measured rounds alternating the modes after one warm-up run each; "
     << o.request.width << "x" << o.request.height << ", " << o.request.steps << " steps, compute "
     << compute_type_name(o.request.compute) << ", on " << o.device << ".\n";
  if (o.profile) {
    md << "\n## Where a step's time goes (mean per step)\n\n| op kind |";
    for (const auto& m : modes) md << " " << m.mode.label() << " ms | share |";
    md << "\n|---|";
    for (std::size_t i = 0; i < modes.size(); ++i) md << "---|---|";
    md << "\n";
    for (int i = 0; i <= kOpKinds; ++i) {
      md << "| " << (i < kOpKinds ? op_kind_name(static_cast<OpKind>(i)) : "other (sampler, activations, glue)") << " |";
      for (const auto& m : modes) {
        // the profile covers exactly the measured steps
        const double steps = std::max<double>(1, m.step_ms.size());
        const double total = std::accumulate(m.step_ms.begin(), m.step_ms.end(), 0.0);
        double v = 0;
        if (i < kOpKinds) {
          v = m.profile.ms[static_cast<std::size_t>(i)];
        } else {
          v = total;
          for (double x : m.profile.ms) v -= x;
        }
        md << " " << fmt(v / steps, 0) << " | " << fmt(100 * v / std::max(1e-9, total), 1) << "% |";
      }
      md << "\n";
    }
  }
  return md.str();
}

}  // namespace fp8s
