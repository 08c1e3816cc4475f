// `bench`: modes alternated A B A B after a warm-up, medians and ranges, the op profile.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "compare/compare.h"
#include "compare/report_format.h"
#include "models/nn.h"

namespace fp8s {

using report::fmt;
using report::mb;

std::vector<BenchMode> run_bench(BenchOptions& o, const std::function<void(const std::string&)>& progress) {
  LoadOptions load = o.load;
  load.storage = o.modes.front().storage;
  Engine engine(load);
  o.device = engine.info().device;
  o.gpu = engine.info().gpu;
  GenerationRequest request = o.request;
  if (request.seed < 0) request.seed = 1;
  engine.validate(request);
  const std::atomic<bool> never{false};
  const std::atomic<bool>& cancel = o.cancel ? *o.cancel : never;
  std::vector<BenchMode> out(o.modes.size());
  std::vector<uint64_t> decode_ns(o.modes.size()), decode_weights(o.modes.size());
  std::vector<double> step_total(o.modes.size());
  for (int round = -1; round < o.repeats; ++round) {
    for (std::size_t k = 0; k < o.modes.size(); ++k) {
      if (progress) progress((round < 0 ? std::string("warm-up ") : "round " + std::to_string(round + 1) + " ") + o.modes[k].label());
      request.storage = o.modes[k].storage;
      request.fp8_compute = o.modes[k].fp8_compute;
      request.weight_budget = o.modes[k].weight_budget;
      reset_decode_stats();
      // the profile covers the sampling steps only: an observer switches it on at "sample"
      struct ProfileSteps : Observer {
        bool on;
        explicit ProfileSteps(bool o) : on(o) {}
        void onPhase(const PhaseEvent& e) override {
          if (on) set_op_profiling(e.phase == Phase::Sample);
        }
      } observer(o.profile && round >= 0);
      reset_op_profile();
      const auto r = engine.generate(request, &observer, cancel);
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
      m.conv_layout = r.conv_layout;
      m.attention_kernel = r.attention_kernel;
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
     << (o.gpu ? " peak VRAM MB |" : "") << " conv weights | attention |\n"
     << "|---|---|---|---|---|---|---|---|---|" << (o.gpu ? "---|" : "") << "---|---|\n";
  for (const auto& m : modes) {
    std::string runs;
    for (double v : m.run_median_ms) runs += (runs.empty() ? "" : ", ") + fmt(v, 0);
    md << "| " << m.mode.label() << " | " << fmt(m.median_ms, 0) << " | " << fmt(m.min_ms, 0) << "-" << fmt(m.max_ms, 0)
       << " | " << fmt(m.ratio_to_first, 3) << " | " << runs << " | " << (m.decode_share > 0 ? fmt(m.decode_gb_per_s) : "-")
       << " | " << (m.decode_share > 0 ? fmt(100 * m.decode_share, 1) + "%" : "-") << " | " << mb(m.weight_bytes)
       << " | " << mb(m.tracked_peak_bytes) << " |" << (o.gpu ? " " + mb(m.vram_peak_bytes) + " |" : "") << " "
       << m.conv_layout << " | " << m.attention_kernel << " |\n";
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
