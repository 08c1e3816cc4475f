// device-test: the checks a GPU machine runs without Qt (scripts/device-check.sh): native float8
// against the codec on the device, the networks on the device against the same networks on the
// CPU (FP32, FP16 and FP8 storage), one seed's image on both, and the VRAM accounting.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "backend/backend.h"
#include "cli/commands.h"
#include "compare/compare.h"
#include "io/image_metrics.h"
#include "core/error.h"
#include "core/logging.h"
#include "demo/demo_model.h"
#include "fp8/codec.h"
#include "models/architecture.h"
#include "models/synthetic.h"
#include "pipeline/engine.h"

namespace fp8s::cli {
namespace {

struct Checks {
  int failed = 0;
  void report(bool ok, const std::string& what) {
    std::printf("%s  %s\n", ok ? "PASS" : "FAIL", what.c_str());
    std::fflush(stdout);
    if (!ok) ++failed;
  }
};

// Native float8 on `device` against the table codec, every FP16 bit pattern (NaNs by NaN-ness).
void check_native_fp8(Checks& checks, const at::Device& device) {
  if (!backend::has_native_fp8()) {
    std::printf("SKIP  native float8 (LibTorch %s has none)\n", backend::torch_version().c_str());
    return;
  }
  std::vector<int16_t> bits(65536);
  for (int i = 0; i < 65536; ++i) bits[static_cast<std::size_t>(i)] = static_cast<int16_t>(static_cast<uint16_t>(i));
  auto halves = at::from_blob(bits.data(), {65536}, at::kShort).view(at::kHalf).to(device);
  for (auto format : {Fp8Format::E4M3FN, Fp8Format::E5M2}) {
    auto codes = backend::encode_native_fp8(halves, format).view(at::kByte).to(at::kCPU).contiguous();
    const auto* c = codes.data_ptr<uint8_t>();
    int wrong = 0;
    for (int i = 0; i < 65536; ++i) {
      const float x = f16_to_f32(static_cast<uint16_t>(i));
      const bool ok = std::isnan(x) ? fp8_is_nan(c[i], format) : c[i] == encode_fp8(x, format);
      wrong += ok ? 0 : 1;
    }
    checks.report(wrong == 0, std::string("native ") + fp8_format_name(format) + " encode on " + device.str() +
                                  " equals the codec on all 65536 FP16 values (" + std::to_string(wrong) + " differ)");
  }
}

}  // namespace

void register_device_test(CLI::App& app) {
  struct Opts {
    std::string device = "auto", workdir;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("device-test", "check this build on a device against the CPU (exit 1 on a failure)");
  add_device_option(*sub, o->device);
  sub->add_option("--workdir", o->workdir, "folder for the tiny test checkpoint (default: a new temporary one)");
  sub->callback([o] {
    const at::Device device = backend::resolve_device(o->device);
    std::printf("device-test: LibTorch %s%s on %s\n", backend::torch_version().c_str(),
                backend::built_with_cuda() ? " (CUDA build)" : "", backend::describe_device(device).c_str());
    // FP32 on the GPU without TF32, so that the device and the CPU compute the same function
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    Checks checks;
    check_native_fp8(checks, device);

    namespace fs = std::filesystem;
    fs::path dir = o->workdir.empty() ? fs::temp_directory_path() / ("fp8s-device-test-" + std::to_string(::getpid()))
                                      : fs::path(o->workdir);
    fs::create_directories(dir);
    const std::string ckpt = (dir / demo::kRandomDemoFile).string();
    demo::make_random_demo_model(ckpt, 11);

    LoadOptions cpu_load, dev_load;
    cpu_load.checkpoint = dev_load.checkpoint = ckpt;
    cpu_load.device = "cpu";
    dev_load.device = o->device;
    Engine cpu(cpu_load), dev(dev_load);
    checks.report(dev.info().device == backend::describe_device(device), "the engine runs on " + dev.info().device);
    const StorageSpec fp32{WeightType::FP32, Fp8Scale::None, false};
    const StorageSpec fp16{WeightType::FP16, Fp8Scale::None, false};
    for (const auto& st : {fp32, fp16, StorageSpec{WeightType::FP8_E4M3, Fp8Scale::Tensor, false},
                           StorageSpec{WeightType::FP8_E5M2, Fp8Scale::Channel, false}}) {
      const auto ref = cpu.unet_probe(st, ComputeType::FP32, 5, 8);
      const auto got = dev.unet_probe(st, ComputeType::FP32, 5, 8);
      const double err = rel_l2(got, ref);
      char what[160];
      std::snprintf(what, sizeof what, "UNet on the device = on the CPU, %s storage, FP32 compute (rel. L2 %.2e)",
                    weight_type_name(st.weights), err);
      checks.report(err < 1e-4, what);
    }
    // one seed's image on both (the demo model, which carries its own vocabulary): noise is drawn on
    // the CPU, so the device changes only rounding
    LoadOptions demo_cpu, demo_dev;
    demo_cpu.checkpoint = demo_dev.checkpoint = demo::find_demo_model();
    demo_cpu.device = "cpu";
    demo_dev.device = o->device;
    GenerationRequest r;
    r.prompt = "a small yellow star in the top left corner on a blue background";
    r.steps = 6;
    r.seed = 42;
    r.compute = ComputeType::FP32;
    r.storage = fp16;
    std::atomic<bool> never{false};
    try {
      Engine demo_a(demo_cpu), demo_b(demo_dev);
      const auto a = demo_a.generate(r, nullptr, never);
      const auto b = demo_b.generate(r, nullptr, never);
      const double p = psnr(b.images.front().image, a.images.front().image);
      char what[160];
      std::snprintf(what, sizeof what, "the same seed gives the same image on the CPU and the device (PSNR %.1f dB)", p);
      checks.report(p > 40, what);
      if (device.is_cuda()) {
        std::snprintf(what, sizeof what, "peak VRAM %.1f MB >= the weights' %.1f MB", b.vram_peak_bytes / 1e6,
                      b.weight_bytes / 1e6);
        checks.report(b.vram_peak_bytes >= b.weight_bytes, what);
      }
    } catch (const InputError& e) {
      std::printf("SKIP  generation check: %s\n", e.what());  // the demo model is not installed
    }
    std::error_code ec;
    if (o->workdir.empty()) fs::remove_all(dir, ec);
    std::printf("device-test: %d failed\n", checks.failed);
    if (checks.failed) throw RuntimeFailure("device-test: " + std::to_string(checks.failed) + " check(s) failed");
  });
}

}  // namespace fp8s::cli
