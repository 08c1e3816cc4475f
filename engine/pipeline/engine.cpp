#include "pipeline/engine.h"

#include <filesystem>

#include "backend/backend.h"
#include "core/error.h"
#include "core/logging.h"
#include "pipeline/family.h"
#include "pipeline/family_options.h"
#include "io/safetensors.h"
#include "pipeline/run.h"
#include "pipeline/run_support.h"

namespace fp8s {

struct Engine::Impl {
  explicit Impl(const LoadOptions& o) : options(o) {}
  LoadOptions options;
  backend::KernelOptions kernels;  // this engine's, in effect on its thread while it loads and runs (KernelScope)
  std::unique_ptr<FamilyModel> model;
  RunContext run;
};

std::vector<DeviceChoice> available_devices() {
  std::vector<DeviceChoice> out{{"cpu", backend::describe_device(at::Device(at::kCPU))}};
  for (int i = 0; i < backend::cuda_device_count(); ++i) {
    const at::Device d(at::kCUDA, static_cast<c10::DeviceIndex>(i));
    out.push_back({"cuda:" + std::to_string(i), backend::describe_device(d)});
  }
  return out;
}

Engine::Engine(const LoadOptions& options, Observer* observer) : impl_(std::make_unique<Impl>(options)) {
  const auto start = Clock::now();
  if (options.checkpoint.empty()) throw std::invalid_argument("Engine: LoadOptions.checkpoint is empty");
  const at::Device device = backend::resolve_device(options.device);  // a bad --device fails before any read
  impl_->kernels = options.kernels ? *options.kernels : backend::kernel_options_from_environment();
  const backend::KernelScope kernels(impl_->kernels);
  log().info("kernels: {}", backend::describe(impl_->kernels));
  if (observer) observer->onPhase({Phase::Load, 0});
  begin_phase(device, nullptr);
  emit_memory(observer, Phase::Load, -1, start, device);
  // The family is chosen once, from the header; it finds its components and tokenizers and checks
  // its memory before any weight is read. A missing checkpoint is left to the loader, whose error
  // names it.
  const FamilyEntry* family = nullptr;
  if (std::filesystem::exists(options.checkpoint)) family = find_family(SafetensorsFile(options.checkpoint));
  if (!family) family = &registered_families().front();
  std::vector<FamilyOption> load_settings;
  for (const auto& o : family->options) {
    if (o.at_load) load_settings.push_back(o);
  }
  check_options(load_settings, options.options, family->label);
  impl_->model = family->open(impl_->options, device);
  if (device.is_cuda()) log().info("running on {}", backend::describe_device(device));
  impl_->run.family = impl_->model.get();
  impl_->run.model_name = stem_of(options.checkpoint);
  impl_->run.model_hash = legacy_model_hash(options.checkpoint);
  impl_->run.lora_dir = options.lora_dir;
  impl_->run.load_ms = ms_since(start);
  emit_memory(observer, Phase::Load, -1, start, device);
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

std::shared_ptr<const ClipTokenizer> Engine::tokenizer() const { return impl_->model->clip_tokenizer(); }

ModelInfo Engine::info() const {
  const FamilyModel& m = *impl_->model;
  ModelInfo i;
  i.path = impl_->options.checkpoint;
  i.traits = m.traits();
  m.describe(i);
  i.kernels = backend::describe(impl_->kernels);
  const auto b = m.weight_bytes(m.storage());
  i.unet_bytes = b.denoiser;
  i.text_bytes = b.text;
  i.vae_bytes = b.vae;
  i.control_bytes = b.control;
  i.device = backend::describe_device(m.device());
  i.gpu = m.device().is_cuda();
  i.device_total_bytes = backend::device_total_bytes(m.device());
  return i;
}

std::vector<float> Engine::unet_probe(const StorageSpec& storage, ComputeType compute, uint64_t seed,
                                     int latent_size, const std::vector<LoraRequest>& loras,
                                     LoraMode lora_mode) {
  const backend::KernelScope kernels(impl_->kernels);
  return impl_->model->probe(storage, compute, seed, latent_size, loras, lora_mode);
}

void Engine::validate(const GenerationRequest& r) const { validate_run(impl_->run, r); }

GenerationResult Engine::generate(const GenerationRequest& request, Observer* observer,
                                  const std::atomic<bool>& cancel) {
  const backend::KernelScope kernels(impl_->kernels);
  return run_generation(impl_->run, request, observer, cancel);
}

}  // namespace fp8s
