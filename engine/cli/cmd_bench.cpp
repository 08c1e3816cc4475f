// bench: throughput measurements reported as medians with min-max over repeats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "cli/commands.h"
#include "compare/compare.h"
#include "core/error.h"
#include "fp8/codec.h"
#include "io/safetensors.h"
#include "models/quant_probe.h"

namespace fp8s::cli {
namespace {

struct Measurement {
  std::string name;
  double source_bytes = 0;
  std::vector<double> seconds;
};

// The codec's table (GB/s of the source, the range, elements/s) or its JSON.
void report_codec(const std::vector<Measurement>& ms, std::size_t n, std::size_t mib, int repeats, bool json) {
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    std::printf("FP8 codec, %zu M elements (%zu MiB as FP32), %d threads, %d repeats\n", n >> 20,
                mib, at::get_num_threads(), repeats);
    std::printf("%-24s %14s %22s %14s\n", "direction", "GB/s (source)", "min-max", "G elem/s");
  }
  for (const auto& m : ms) {
    const double med = median(m.seconds);
    const double lo = *std::min_element(m.seconds.begin(), m.seconds.end());
    const double hi = *std::max_element(m.seconds.begin(), m.seconds.end());
    const double gbs = m.source_bytes / med / 1e9;
    if (json) {
      out.push_back({{"direction", m.name}, {"gb_per_s", gbs}, {"gb_per_s_min", m.source_bytes / hi / 1e9},
                     {"gb_per_s_max", m.source_bytes / lo / 1e9}, {"gelem_per_s", n / med / 1e9},
                     {"median_ms", med * 1e3}});
    } else {
      std::printf("%-24s %14.2f %10.2f-%-10.2f %14.2f\n", m.name.c_str(), gbs,
                  m.source_bytes / hi / 1e9, m.source_bytes / lo / 1e9, n / med / 1e9);
    }
  }
  if (json) std::cout << nlohmann::json{{"codec", out}, {"elements", n}, {"threads", at::get_num_threads()}}.dump(2) << "\n";
}

void bench_codec(std::size_t mib, int repeats, bool json) {
  const std::size_t n = mib * 1024 * 1024 / 4;  // elements of a `mib` MiB FP32 tensor
  std::vector<float> f32(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (auto& v : f32) v = normal(rng);
  std::vector<uint16_t> b16(n), h16(n);
  f32_to_bf16(f32.data(), b16.data(), n);
  f32_to_f16(f32.data(), h16.data(), n);
  std::vector<uint8_t> codes(n);
  encode_f32_to_fp8(f32.data(), codes.data(), n, Fp8Format::E4M3FN);
  std::vector<float> out32(n);
  std::vector<uint16_t> out16(n);

  std::vector<Measurement> ms;
  std::vector<std::function<void()>> fns;
  auto add = [&](const std::string& name, double bytes, const std::function<void()>& fn) {
    ms.push_back({name, bytes, {}});
    fns.push_back(fn);
    fn();  // warm-up: page faults and tables
  };
  for (Fp8Format f : {Fp8Format::E4M3FN, Fp8Format::E5M2}) {
    const std::string fmt = fp8_format_name(f);
    add("encode f32->" + fmt, n * 4.0, [&, f] { encode_f32_to_fp8(f32.data(), codes.data(), n, f); });
    add("encode bf16->" + fmt, n * 2.0, [&, f] { encode_bf16_to_fp8(b16.data(), codes.data(), n, f); });
    add("encode f16->" + fmt, n * 2.0, [&, f] { encode_f16_to_fp8(h16.data(), codes.data(), n, f); });
    add("decode " + fmt + "->f32", n * 1.0, [&, f] { decode_fp8_to_f32(codes.data(), out32.data(), n, f); });
    add("decode " + fmt + "->bf16", n * 1.0, [&, f] { decode_fp8_to_bf16(codes.data(), out16.data(), n, f); });
    add("decode " + fmt + "->f16", n * 1.0, [&, f] { decode_fp8_to_f16(codes.data(), out16.data(), n, f); });
  }
  // 16-bit weights into the compute type, as WeightStore::decode converts them (LibTorch's copy),
  // beside the codec's own bulk widening
  const auto h16_t = at::from_blob(h16.data(), {static_cast<int64_t>(n)}, at::kHalf);
  const auto b16_t = at::from_blob(b16.data(), {static_cast<int64_t>(n)}, at::kBFloat16);
  auto out32_t = at::from_blob(out32.data(), {static_cast<int64_t>(n)}, at::kFloat);
  auto out16_t = at::from_blob(out16.data(), {static_cast<int64_t>(n)}, at::kBFloat16);
  add("convert f16->f32", n * 2.0, [&] { out32_t.copy_(h16_t); });
  add("convert bf16->f32", n * 2.0, [&] { out32_t.copy_(b16_t); });
  add("convert f16->bf16", n * 2.0, [&] { out16_t.copy_(h16_t); });
  add("widen f16->f32 (codec)", n * 2.0, [&] { f16_to_f32(h16.data(), out32.data(), n); });
  add("widen bf16->f32 (codec)", n * 2.0, [&] { bf16_to_f32(b16.data(), out32.data(), n); });
  // Rounds alternate over all directions so that drift in machine state hits each equally.
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t i = 0; i < fns.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fns[i]();
      ms[i].seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  report_codec(ms, n, mib, repeats, json);
}

// Each storage type's relative RMS weight error over a model file's Linear weights.
void bench_weights(const std::string& model, const std::vector<std::string>& types, Fp8Scale scale, bool json) {
  if (model.empty()) throw InputError("bench --section weights needs --model FILE");
  const SafetensorsFile file(model);
  nlohmann::json out = nlohmann::json::array();
  if (!json) std::printf("Weight error of %s's Linear weights (quantised and decoded, one at a time)\n| storage | layers | weights | rel. RMS error |\n|---|---|---|---|\n", model.c_str());
  for (const auto& name : types) {
    const auto type = parse_weight_type(name);
    if (!type) throw InputError("--weights: unknown storage '" + name + "'");
    const auto e = measure_weight_error(file, *type, scale);
    if (json) {
      out.push_back({{"storage", name}, {"layers", e.layers}, {"weights", e.weights}, {"rel_rms", e.rel_rms}});
    } else {
      std::printf("| %s | %llu | %llu | %.4f |\n", name.c_str(), static_cast<unsigned long long>(e.layers),
                  static_cast<unsigned long long>(e.weights), e.rel_rms);
      std::fflush(stdout);
    }
  }
  if (json) std::cout << nlohmann::json{{"weight_error", out}}.dump(2) << "\n";
}

}  // namespace

void register_bench(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::vector<std::string> sections{"codec"};
    std::size_t mib = 256;
    int repeats = 5;
    std::string model, scale = "channel";
    std::vector<std::string> weights{"fp8-e4m3", "int8", "mxfp8", "nvfp4"};
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("bench", "measure throughput (medians, min-max over repeats)");
  add_common_options(*sub, o->common, true);
  sub->add_option("--section", o->sections, "what to measure: codec, generate, weights (each storage's weight error on --model)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::IsMember({"codec", "generate", "weights"}))
      ->capture_default_str();
  sub->add_option("--size-mib", o->mib, "tensor size for the codec section (MiB of FP32)")
      ->check(CLI::Range(1, 8192))
      ->capture_default_str();
  sub->add_option("--codec-repeats", o->repeats, "repeats per codec measurement")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  auto* weights = sub->add_option_group("weights section");
  weights->add_option("--weight-model", o->model, "weights: the model file whose Linear weights are measured");
  weights->add_option("--storages", o->weights, "weights: the storage types (fp8-e4m3, fp8-e5m2, int8, mxfp8, nvfp4)")
      ->delimiter(',')
      ->capture_default_str();
  weights->add_option("--weight-fp8-scale", o->scale, "weights: the FP8 types' scaling (none, tensor, channel)")
      ->check(CLI::IsMember({"none", "tensor", "channel"}))
      ->capture_default_str();
  auto generate = register_bench_generate(*sub);
  sub->callback([o, generate] {
    for (const auto& s : o->sections) {
      if (s == "codec") bench_codec(o->mib, o->repeats, o->common.json);
      if (s == "generate") generate(o->common.json);
      if (s == "weights") bench_weights(o->model, o->weights, *parse_fp8_scale(o->scale), o->common.json);
    }
  });
}

}  // namespace fp8s::cli
