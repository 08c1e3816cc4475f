// `compare`: the same request in several storage modes on one engine, and what differs between them.
#include "compare/compare.h"
#include "models/streaming.h"

#include <optional>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "backend/backend.h"
#include "compare/report_format.h"
#include "core/error.h"
#include "io/image_metrics.h"
#include "io/png.h"

namespace fp8s {
namespace {

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
  if (!budget_text.empty()) s += "@" + budget_text;
  return s;
}

std::vector<ModeSpec> parse_modes(const std::string& list, Fp8Scale default_scale) {
  std::vector<ModeSpec> modes;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    ModeSpec m;
    if (const auto at = item.find('@'); at != std::string::npos) {  // "fp16@8G": a weight budget
      m.budget_text = item.substr(at + 1);
      m.weight_budget = parse_weight_budget(m.budget_text);
      if (!m.weight_budget) m.budget_text.clear();  // "@auto"
      item.resize(at);
    }
    // "fp8-e4m3+fp8-compute": FP8 storage with the Linear layers through _scaled_mm (CUDA 8.9+)
    const std::string suffix = "+fp8-compute";
    if (item.size() > suffix.size() && item.compare(item.size() - suffix.size(), suffix.size(), suffix) == 0) {
      m.fp8_compute = true;
      item.resize(item.size() - suffix.size());
    }
    const auto slash = item.find('/');
    const std::string weights = item.substr(0, slash);
    const auto w = parse_weight_type(weights);
    if (!w) throw InputError("mode '" + item + "': unknown storage '" + weights + "' (fp32, fp16, bf16, fp8-e4m3, fp8-e5m2, int8, mxfp8, nvfp4)");
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

namespace {

std::vector<RetentionRow> measure_retention(Engine& engine, const GenerationRequest& request,
                                            const std::vector<ModeSpec>& modes) {
  std::vector<RetentionRow> out;
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
  const StorageSpec fp16{WeightType::FP16, Fp8Scale::None, false};
  const auto ref_delta =
      minus(engine.unet_probe(fp16, ComputeType::FP32, seed, latent, request.loras, LoraMode::Merge),
            engine.unet_probe(fp16, ComputeType::FP32, seed, latent));
  const double reference = norm_diff(ref_delta, std::vector<float>(ref_delta.size(), 0.0f));
  for (const auto& mode : modes) {
    const auto base = engine.unet_probe(mode.storage, ComputeType::FP32, seed, latent);
    for (auto lm : {LoraMode::Merge, LoraMode::MergeStochastic, LoraMode::Online}) {
      if (!is_fp8(mode.storage.weights) && lm == LoraMode::MergeStochastic) continue;
      const auto with = engine.unet_probe(mode.storage, ComputeType::FP32, seed, latent, request.loras, lm);
      const auto delta = minus(with, base);
      double dot = 0;
      for (std::size_t i = 0; i < delta.size(); ++i) dot += double(delta[i]) * ref_delta[i];
      const double ref2 = std::max(reference * reference, 1e-30);
      out.push_back({mode.label(), lora_mode_name(lm), norm_diff(with, base) / std::max(reference, 1e-30), dot / ref2});
    }
  }
  return out;
}

// A mode that ran: its step times and residency, its pixels and its peak drop per weight byte
// saved against the first mode that ran (itself when it is that mode).
void score_mode(ModeResult& m, Engine& engine, const CompareReport& so_far) {
  m.step_ms_mean = report::mean(m.result.timing.step_ms);
  m.step_ms_median = median(m.result.timing.step_ms);
  {
    const auto now = engine.info();
    m.streamed_blocks = now.streamed_blocks;
    m.resident_block_bytes = now.resident_block_bytes;
    m.residency = now.residency;
  }
  // the reference: the first mode that ran
  const auto ref = std::find_if(so_far.modes.begin(), so_far.modes.end(), [](const ModeResult& o) { return o.refused.empty(); });
  const bool is_ref = ref == so_far.modes.end();
  const auto& img = m.result.images.front().image;
  const auto& first = is_ref ? img : ref->result.images.front().image;
  m.psnr = psnr(img, first);
  m.ssim = ssim(img, first);
  m.max_abs_diff = max_abs_diff(img, first);
  const auto& r0 = is_ref ? m.result : ref->result;
  const double saved = double(r0.weight_bytes) - double(m.result.weight_bytes);
  if (std::abs(saved) > 0) {
    const double drop = so_far.gpu ? double(r0.vram_peak_bytes) - double(m.result.vram_peak_bytes)
                                   : double(r0.tracked_peak_bytes) - double(m.result.tracked_peak_bytes);
    m.drop_per_weight_byte = drop / saved;
  }
}

}  // namespace

CompareReport measure_compare(Engine& engine, const CompareOptions& o, const CompareHooks& hooks) {
  CompareReport report;
  const auto info = engine.info();
  report.model = info.path;
  report.request = o.request;
  GenerationRequest& request = report.request;
  request.seed = resolve_seed(request.seed);  // every mode gets the same seed
  try {
    engine.validate(request);
  } catch (const DoesNotFit&) {
    // the request's own storage: each mode is checked as it runs, and one that cannot fit is reported
  }
  report.source_note = info.source_note;  // logged once by the model
  report.device = info.device;
  report.gpu = info.gpu;
  const std::atomic<bool> never{false};
  const auto& cancel = hooks.cancel ? *hooks.cancel : never;
  if (!request.loras.empty()) {
    if (hooks.progress) hooks.progress("measuring LoRA retention");
    report.retention = measure_retention(engine, request, o.modes);
  }
  if (o.retention_only) return report;
  for (std::size_t k = 0; k < o.modes.size(); ++k) {
    const auto& mode = o.modes[k];
    if (hooks.progress) hooks.progress("generating with " + mode.label());
    request.storage = mode.storage;
    request.fp8_compute = mode.fp8_compute;
    request.weight_budget = mode.weight_budget;
    ModeResult m;
    m.mode = mode;
    // each mode's VRAM from an empty cache: the previous mode's blocks would count as reserved here
    if (report.gpu) backend::empty_device_cache();
    try {
      m.result = engine.generate(request, hooks.observer ? hooks.observer(k) : nullptr, cancel);
    } catch (const DoesNotFit& e) {
      // a 16-bit storage a large model cannot hold here: the column says so, with its estimate, and the rest run
      m.refused = e.what();
      if (hooks.progress) hooks.progress(mode.label() + " does not fit: " + m.refused);
      report.modes.push_back(std::move(m));
      continue;
    }
    score_mode(m, engine, report);
    report.modes.push_back(std::move(m));
    if (hooks.mode_finished) hooks.mode_finished(k, report.modes.back());
  }
  if (std::all_of(report.modes.begin(), report.modes.end(), [](const ModeResult& m) { return !m.refused.empty(); })) {
    throw DoesNotFit(report.modes.front().refused);
  }
  if (o.unet_error && info.traits.fp32_probe) {
    if (hooks.progress) hooks.progress("measuring the UNet output error against fp32 storage");
    const int latent = std::max(8, request.height / 8 / 2);
    const StorageSpec fp32;
    const auto seed = static_cast<uint64_t>(request.seed);
    const auto ref = engine.unet_probe(fp32, ComputeType::FP32, seed, latent);
    for (auto& m : report.modes) {
      if (m.refused.empty()) m.unet_rel_l2 = rel_l2(engine.unet_probe(m.mode.storage, ComputeType::FP32, seed, latent), ref);
    }
  }
  return report;
}

CompareReport run_compare(const CompareOptions& o, const std::function<void(const std::string&)>& progress) {
  LoadOptions load = o.load;
  // opened in the first mode that fits (a family may refuse a storage that cannot fit at load)
  std::optional<Engine> opened;
  for (std::size_t k = 0; k < o.modes.size() && !opened; ++k) {
    load.storage = o.modes[k].storage;
    try {
      opened.emplace(load);
    } catch (const DoesNotFit&) {
      if (k + 1 == o.modes.size()) throw;
    }
  }
  Engine& engine = *opened;
  try {
    engine.validate(o.request);  // before a folder is made
  } catch (const DoesNotFit&) {
    // the request's own storage may not fit: the modes are checked one by one as they run
  }
  const std::string folder = make_run_folder(o.outdir);
  CompareHooks hooks;
  hooks.progress = progress;
  hooks.cancel = o.cancel;
  CompareReport report = measure_compare(engine, o, hooks);
  write_compare(report, folder);
  return report;
}

}  // namespace fp8s
