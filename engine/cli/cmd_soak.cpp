// soak: many consecutive generations in one Engine — FP16 and FP8 storage alternating, a LoRA on and
// off with changing multipliers, every 7th run cancelled mid-way — with tracked tensor bytes and RSS
// after each run. Leaks show as tracked bytes that do not return to their baseline, or RSS that
// keeps growing after the warm-up.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "memory/process_memory.h"
#include "memory/tracking_allocator.h"
#include "pipeline/engine.h"

namespace fp8s::cli {
namespace {

struct CancelAt : Observer {
  int at = 0;
  std::atomic<bool>* flag = nullptr;
  void onStep(const StepEvent& e) override {
    if (at > 0 && e.step == at) flag->store(true);
  }
};

struct Row {
  int run = 0;
  std::string storage;
  double lora = 0;  // 0: off
  bool cancelled = false;
  uint64_t tracked_live = 0, rss = 0;
  double ms = 0;
};

// Least-squares slope of ys over xs.
double slope(const std::vector<double>& xs, const std::vector<double>& ys) {
  const double n = static_cast<double>(xs.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) sx += xs[i], sy += ys[i], sxx += xs[i] * xs[i], sxy += xs[i] * ys[i];
  const double d = n * sxx - sx * sx;
  return d == 0 ? 0 : (n * sxy - sx * sy) / d;
}

struct SoakOptions {
  CommonOptions common;
  ModelFlags m;
  std::string lora, csv;
  int runs = 200, steps = 6, warmup = 20, size = 64;
};

// Run i (0-based): FP16 and FP8 alternating, the LoRA on two runs of three with a changing
// multiplier, every 7th cancelled half-way; its row after it.
Row soak_run(Engine& engine, const SoakOptions& o, int i) {
  GenerationRequest r;
  r.prompt = "a red circle on a blue background";
  r.steps = o.steps;
  r.cfg = 5;
  r.seed = i;
  r.width = r.height = o.size;
  r.sampler = Sampler::Euler;
  r.schedule = Schedule::Normal;
  r.compute = ComputeType::FP32;
  const bool fp8 = i % 2 == 1;
  r.storage.weights = fp8 ? WeightType::FP8_E4M3 : WeightType::FP16;
  r.storage.scale = fp8 ? Fp8Scale::Tensor : Fp8Scale::None;
  Row row;
  row.run = i + 1;
  row.storage = weight_type_name(r.storage.weights);
  if (i % 3 != 0) {
    row.lora = 0.2 * (1 + i % 5);
    r.loras.push_back({o.lora, row.lora, row.lora});
  }
  std::atomic<bool> cancel{false};
  CancelAt observer;
  observer.flag = &cancel;
  observer.at = i % 7 == 6 ? std::max(1, o.steps / 2) : 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    engine.generate(r, &observer, cancel);
  } catch (const Cancelled&) {
    row.cancelled = true;
  }
  row.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  row.tracked_live = tracked_bytes().live;
  row.rss = read_process_memory().rss_bytes;
  return row;
}

void write_csv(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream f(path);
  f << "run,storage,lora,cancelled,tracked_live_bytes,rss_bytes,ms\n";
  for (const auto& row : rows) {
    f << row.run << "," << row.storage << "," << row.lora << "," << row.cancelled << "," << row.tracked_live << ","
      << row.rss << "," << row.ms << "\n";
  }
  if (!f) throw RuntimeFailure("cannot write " + path);
}

// The leak figures: tracked bytes against each state's baseline (storage, LoRA on/off: the value
// after the first run in that state), RSS after the warm-up (growth, maximum, slope).
nlohmann::json soak_report(const std::vector<Row>& rows, int warmup) {
  std::map<std::pair<std::string, bool>, uint64_t> baseline;
  int64_t worst_tracked = 0;
  for (const auto& row : rows) {
    const auto key = std::make_pair(row.storage, row.lora != 0);
    const auto [it, first] = baseline.emplace(key, row.tracked_live);
    worst_tracked = std::max<int64_t>(worst_tracked, std::llabs(static_cast<int64_t>(row.tracked_live) - static_cast<int64_t>(it->second)));
  }
  std::vector<double> xs, ys;
  for (const auto& row : rows) {
    if (row.run <= warmup) continue;
    xs.push_back(row.run);
    ys.push_back(static_cast<double>(row.rss));
  }
  const double rss_warm = static_cast<double>(rows[static_cast<std::size_t>(warmup)].rss);
  const double rss_end = static_cast<double>(rows.back().rss);
  const double rss_max = static_cast<double>(std::max_element(rows.begin() + warmup, rows.end(), [](const Row& a, const Row& b) { return a.rss < b.rss; })->rss);
  int cancelled = 0;
  for (const auto& row : rows) cancelled += row.cancelled;
  nlohmann::json report{{"runs", rows.size()},
                        {"warmup", warmup},
                        {"cancelled", cancelled},
                        {"tracked_baselines", nlohmann::json::array()},
                        {"tracked_max_deviation_bytes", worst_tracked},
                        {"rss_after_warmup_bytes", rss_warm},
                        {"rss_end_bytes", rss_end},
                        {"rss_max_after_warmup_bytes", rss_max},
                        {"rss_growth_percent", (rss_end - rss_warm) / rss_warm * 100.0},
                        {"rss_slope_bytes_per_run", slope(xs, ys)}};
  for (const auto& [key, bytes] : baseline) {
    report["tracked_baselines"].push_back({{"storage", key.first}, {"lora", key.second}, {"bytes", bytes}});
  }
  return report;
}

void print_report(const nlohmann::json& j) {
  std::printf("soak: %d runs (%d cancelled mid-way), %d warm-up\n", j["runs"].get<int>(), j["cancelled"].get<int>(),
              j["warmup"].get<int>());
  for (const auto& b : j["tracked_baselines"]) {
    std::printf("  tracked live bytes after %s%s runs: %llu\n", b["storage"].get<std::string>().c_str(),
                b["lora"].get<bool>() ? " + LoRA" : "", static_cast<unsigned long long>(b["bytes"].get<uint64_t>()));
  }
  std::printf("  largest deviation of tracked live bytes from its baseline: %lld bytes\n",
              static_cast<long long>(j["tracked_max_deviation_bytes"].get<int64_t>()));
  std::printf("  RSS after warm-up %.1f MB, at the end %.1f MB (%+.2f%%), max %.1f MB, slope %+.1f kB/run\n",
              j["rss_after_warmup_bytes"].get<double>() / 1e6, j["rss_end_bytes"].get<double>() / 1e6,
              j["rss_growth_percent"].get<double>(), j["rss_max_after_warmup_bytes"].get<double>() / 1e6,
              j["rss_slope_bytes_per_run"].get<double>() / 1e3);
}

}  // namespace

void register_soak(CLI::App& app) {
  auto o = std::make_shared<SoakOptions>();
  auto* sub = app.add_subcommand("soak", "many generations in one engine: tracked bytes and RSS after each (leak check)");
  add_common_options(*sub, o->common, true);
  add_model_options(*sub, o->m, false);
  sub->add_option("--lora", o->lora, "a LoRA for the model, switched on and off with changing multipliers")->required();
  sub->add_option("--runs", o->runs, "generations")->check(CLI::Range(1, 100000))->capture_default_str();
  sub->add_option("--warmup", o->warmup, "runs before RSS growth is measured")->check(CLI::Range(0, 100000))->capture_default_str();
  sub->add_option("--steps", o->steps, "steps per generation")->check(CLI::Range(2, 1000))->capture_default_str();
  sub->add_option("--size", o->size, "image width and height")->capture_default_str();
  sub->add_option("--csv", o->csv, "write one row per run to this file");
  sub->callback([o] {
    if (o->warmup >= o->runs) throw InputError("--warmup must be smaller than --runs");
    const LoadOptions load = load_options(o->m);
    Engine engine(load);
    std::vector<Row> rows;
    for (int i = 0; i < o->runs; ++i) {
      rows.push_back(soak_run(engine, *o, i));
      const auto& row = rows.back();
      if ((i + 1) % 10 == 0 || i + 1 == o->runs) {
        log().info("soak: {}/{} runs, tracked {:.2f} MB, RSS {:.1f} MB", i + 1, o->runs, row.tracked_live / 1e6, row.rss / 1e6);
      }
    }
    if (!o->csv.empty()) write_csv(o->csv, rows);
    const auto report = soak_report(rows, o->warmup);
    if (o->common.json) {
      std::cout << report.dump(2) << "\n";
      return;
    }
    print_report(report);
  });
}

}  // namespace fp8s::cli
