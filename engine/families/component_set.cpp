#include "families/component_set.h"

#include <sstream>

#include "backend/backend.h"
#include "core/compute_choice.h"
#include "core/error.h"
#include "core/logging.h"
#include "families/weight_budget.h"
#include "lora/lora_apply.h"
#include "memory/process_memory.h"
#include "models/component_load.h"
#include "pipeline/engine.h"
#include "pipeline/family_options.h"
#include "pipeline/infotext.h"
#include "pipeline/img2img.h"
#include "pipeline/run_support.h"
#include "text/prompt_parser.h"

namespace fp8s {
namespace {

constexpr uint64_t kBudgetStep = 256ull << 20;  // an automatic budget in whole steps: no reload for a few pages

double bytes_per_weight(const StorageSpec& s) { return stored_bytes_per_weight(s.weights); }

WeightType file_type(const ComponentSource& c) {
  return c.found() ? component_storage(SafetensorsFile(c.path), c.prefix, {WeightType::BF16}).weights : WeightType::BF16;
}

}  // namespace

FamilyTraits transformer_traits(std::string id, std::string name, int token, std::string encode_label) {
  FamilyTraits t;
  t.prediction = Prediction::Flow;
  t.id = std::move(id);
  t.name = std::move(name);
  t.size_multiple = t.min_size = t.size_step = token;
  t.samplers = {Sampler::Euler, Sampler::Heun, Sampler::DpmPP2M};
  t.schedules = {{Schedule::Normal, "Simple"}};
  t.default_cfg = 1.0f;
  t.clip_skip = false;
  t.fp32_probe = false;
  t.denoiser_label = "Transformer";
  t.encode_label = std::move(encode_label);
  t.sample_label = "transformer steps";
  t.decode_label = "autoencoder decode";
  return t;
}

StorageSpec part_storage(Part part, const StorageSpec& storage, WeightType text_type, WeightType vae_type) {
  StorageSpec s = storage;
  if (part == Part::Denoiser) return s;
  if (part == Part::Vae && is_quantised(s.weights) && !s.fp8_vae) s.weights = WeightType::BF16;
  if (s.weights == WeightType::FP16 || s.weights == WeightType::BF16) s.weights = part == Part::Vae ? vae_type : text_type;
  return s;
}

WeightBytes parts_estimate(const ComponentSource& denoiser, const ComponentSource& text, const ComponentSource& vae,
                           const StorageSpec& storage) {
  return {component_weight_bytes(denoiser, storage, true, false), component_weight_bytes(text, storage, true, true),
          component_weight_bytes(vae, storage, storage.fp8_vae, true)};
}

ResidencyPlan denoiser_plan(const PartSpec& denoiser, const StorageSpec& storage, uint64_t budget) {
  if (!denoiser.source.found()) throw InputError(denoiser.missing);
  const SafetensorsFile file(denoiser.source.path);
  const auto m = denoiser.make(file, denoiser.source.prefix);
  auto* net = dynamic_cast<BlockNetwork*>(m.get());
  if (!net) throw InputError(denoiser.source.path + ": " + denoiser.label + "'s blocks do not stream");
  return plan_network(*m, net->blocks(), file, denoiser.source.prefix, storage, true, true, budget);
}

ComponentSet::ComponentSet(std::array<PartSpec, 3> parts, const StorageSpec& storage, const at::Device& device)
    : parts_(std::move(parts)), storage_(storage), device_(device) {
  for (const auto& p : parts_) {
    if (!p.source.found()) throw InputError(p.missing);
  }
  text_type_ = file_type(spec(Part::Text).source);
  vae_type_ = file_type(spec(Part::Vae).source);
}

ComponentSet::~ComponentSet() { release_all(); }

StreamStats ComponentSet::stream_stats() const {
  auto s = streaming_[0].stats();
  s += streaming_[1].stats();
  return s;
}

void ComponentSet::reset_stream_stats() {
  for (auto& s : streaming_) s.reset_stats();
}

void ComponentSet::end_sampling() { streaming_[0].end(); }

void ComponentSet::describe(ModelInfo& i) const {
  describe_residency(streaming_[0].plan, i);
  i.architecture = traits().name;
  i.storage = weight_type_name(storage_.weights);
  const auto b = weight_bytes(storage_);
  const uint64_t bytes[] = {b.denoiser, b.text, b.vae};
  for (int k = 0; k < 3; ++k) {
    const auto p = static_cast<Part>(k);
    i.components.push_back({spec(p).name, spec(p).source.path, weight_type_name(storage_of(p).weights), bytes[k]});
  }
}

WeightBytes ComponentSet::weight_bytes(const StorageSpec& storage) const {
  auto w = estimate_cached(storage);
  if (storage == storage_) {  // what is loaded, as measured
    if (held_[0]) w.denoiser = held_[0];
    if (held_[1]) w.text = held_[1];
    if (held_[2]) w.vae = held_[2];
  }
  return w;
}

void ComponentSet::check(const GenerationRequest& r, int w, int h) const {
  if (r.enable_hr) w = r.hr_target_width(w), h = r.hr_target_height(h);
  if (!r.loras.empty() || !parse_extra_networks(r.prompt).loras.empty()) require_lora_layout();
  (void)budget(r, w, h, run_memory());
}

void ComponentSet::prepare(const GenerationRequest& r) {
  cached_job_ = nullptr;
  const int w = r.enable_hr ? r.hr_target_width(r.width) : r.width;
  const int h = r.enable_hr ? r.hr_target_height(r.height) : r.height;
  // what is free now and what this model holds, read once: the budget and the phase plan agree
  const uint64_t free_bytes = run_memory();
  const uint64_t available = free_bytes ? free_bytes + held_total() : 0;
  const auto b = budget(r, w, h, free_bytes);
  if (r.storage != storage_ || b != budget_) {
    release_all();
    storage_ = r.storage;
    budget_ = b;
  }
  fp8_compute_ = r.fp8_compute;
  set_fp8_compute();
  set_loras(r.loras, r.lora_mode);  // every file read and planned before a weight changes
  const auto bytes = estimate_cached(storage_);
  // under a budget, or where they do not fit together, the phases take turns
  together_ = !budget_ && (available == 0 || bytes.total() + working_bytes(w, h, r.batch_size, r.compute) + process_bytes() < available);
  if (!together_) release(Part::Denoiser);
  (void)part(Part::Text);
  prepare_request(r);
}

void ComponentSet::begin_sampling() {
  (void)part(Part::Denoiser);
  (void)part(Part::Vae);
}

void ComponentSet::prepare_pass(SamplingInit& init, const ImageJob* job, const GenerationRequest& r, int, int,
                                at::Generator& gen) {
  if (!job) return;
  if (cached_job_ != job) {  // the posterior mean, once a request
    cached_latent_ = encode_images(image_tensor(job->source), r.compute, gen);
    cached_job_ = job;
  }
  PreparedInit prep;
  prep.latent = cached_latent_.expand({r.batch_size, -1, -1, -1}).contiguous();
  apply_latent_mask(prep, *job, r, r.batch_size, gen);
  init.latent = prep.latent;
  init.keep = prep.keep;
}

torch::nn::Module& ComponentSet::part(Part p) {
  const int k = static_cast<int>(p);
  auto& m = modules_[k];
  if (m) return *m;
  const PartSpec& s = spec(p);
  const StorageSpec st = storage_of(p);
  if (budget_ && p != Part::Vae) {
    auto make = [&s](const SafetensorsFile& f, const std::string& prefix) {
      auto made = std::dynamic_pointer_cast<BlockNetwork>(s.make(f, prefix));
      if (!made) throw InputError(f.path() + ": " + s.label + "'s blocks do not stream");
      return made;
    };
    m = load_streamed(s.source, s.missing, st, s.ignorable, device_, *budget_, held_[k], load_ms_, streaming_[k], make);
    log().info("{}, {} budget {:.1f} GB: {}", s.label, weight_type_name(st.weights), static_cast<double>(*budget_) / 1e9,
               streaming_[k].plan.describe());
  } else {
    // the denoiser quantised in any storage; the text encoder in FP8; the autoencoder with --fp8-vae
    const bool quantise = p == Part::Denoiser || (p == Part::Text ? is_quantised(st.weights) : st.fp8_vae);
    m = load_component(s.source, s.missing, st, quantise, s.ignorable, device_, held_[k], load_ms_, s.make);
  }
  if (p == Part::Denoiser) {
    set_fp8_compute();
    loras_.apply(*m, lora_component());
  }
  return *m;
}

void ComponentSet::text_done() {
  if (!together_) release(Part::Text);
}

void ComponentSet::use_for_probe(const StorageSpec& storage, const std::vector<LoraRequest>& loras, LoraMode mode) {
  if (storage != storage_) {
    release_all();
    storage_ = storage;
    budget_.reset();
  }
  set_loras(loras, mode);
}

void ComponentSet::check_at_open() const {
  if (!device_.is_cpu()) return;
  (void)budget_for(storage_, 512, 512, 1, resolve_compute(ComputeType::Auto, false).type, std::nullopt, available_memory_bytes());
}

void ComponentSet::release(Part p) {
  const int k = static_cast<int>(p);
  if (k < 2) streaming_[k].clear();
  modules_[k].reset();
  if (p == Part::Denoiser) loras_.forget("");
  held_[k] = 0;
  if (p != Part::Vae) trim_heap();
}

void ComponentSet::release_all() {
  release(Part::Denoiser);
  release(Part::Text);
  release(Part::Vae);
}

const WeightBytes& ComponentSet::estimate_cached(const StorageSpec& storage) const {
  for (const auto& [s, b] : estimates_) {
    if (s == storage) return b;
  }
  estimates_.emplace_back(storage, parts_estimate(spec(Part::Denoiser).source, spec(Part::Text).source, spec(Part::Vae).source, storage));
  return estimates_.back().second;
}

// The memory the weights may take beside what this model holds: the host's on the CPU, the card's
// free memory on a GPU; 0 where unknown.
uint64_t ComponentSet::run_memory() const {
  return device_.is_cpu() ? available_memory_bytes() : backend::device_available_bytes(device_);
}

std::optional<uint64_t> ComponentSet::budget(const GenerationRequest& r, int w, int h, uint64_t free_bytes) const {
  if (free_bytes == 0) return r.weight_budget;  // unknown: as asked
  auto b = budget_for(r.storage, w, h, r.batch_size, r.compute, r.weight_budget, free_bytes + held_total());
  if (b && !r.weight_budget) *b -= *b % kBudgetStep;
  return b;
}

std::optional<uint64_t> ComponentSet::budget_for(const StorageSpec& storage, int w, int h, int batch, ComputeType compute,
                                                 std::optional<uint64_t> requested, uint64_t available) const {
  auto phases = [&](const StorageSpec& st) {
    const auto b = estimate_cached(st);
    PhaseBytes p;
    p.denoiser = b.denoiser;
    p.text = b.text;
    p.vae = b.vae;
    p.working = working_bytes(w, h, batch, compute);
    p.process = process_bytes();
    p.denoiser_staging = static_cast<uint64_t>(2.0 * static_cast<double>(spec(Part::Denoiser).block_params) * bytes_per_weight(st));
    p.text_staging = static_cast<uint64_t>(2.0 * static_cast<double>(spec(Part::Text).block_params) *
                                           bytes_per_weight(part_storage(Part::Text, st, text_type_, vae_type_)));
    return p;
  };
  const std::string what = storage_label(storage) + " " + model_name() + " at " + std::to_string(w) + "x" + std::to_string(h);
  return choose_weight_budget(phases(storage), available, requested, what, is_quantised(storage.weights), [&] {
    StorageSpec fp8 = storage;
    fp8.weights = WeightType::FP8_E4M3;
    return phases(fp8).peak(std::nullopt);
  });
}

void ComponentSet::set_loras(const std::vector<LoraRequest>& loras, LoraMode mode_in) {
  const LoraMode mode = effective_lora_mode(mode_in, storage_);
  if (loras_.same(loras, mode)) return;
  if (!lora_layout()) {
    if (!loras.empty()) require_lora_layout();
    return;
  }
  auto next = LoraSet::read(loras, mode, lora_planner());
  auto& m = modules_[0];
  if (m) loras_.undo(*m, lora_component());
  loras_ = std::move(next);
  if (m) loras_.apply(*m, lora_component());
}

void ComponentSet::require_lora_layout() const {
  if (!lora_layout()) throw InputError(model_name() + " takes no LoRA yet: remove the <lora:...> tags and --lora");
}

LoraSet::Planner ComponentSet::lora_planner() const {
  const auto layout = lora_layout();
  auto weights = std::make_shared<const std::map<std::string, std::vector<int64_t>>>(lora_linear_weights(spec(Part::Denoiser).source));
  return [layout, weights](const LoraFile& file, const std::vector<LoraModuleLayout>& modules) {
    return layout(modules, file.metadata, *weights, file.path);
  };
}

LoraComponent ComponentSet::lora_component() const {
  return {"", false, spec(Part::Denoiser).source, storage_, streaming_[0].plan.any(), spec(Part::Denoiser).label};
}

void ComponentSet::set_fp8_compute() {
  if (!modules_[0]) return;
  for (const auto& m : modules_[0]->modules(false)) {
    if (auto* l = dynamic_cast<QLinearImpl*>(m.get())) l->fp8_compute = fp8_compute_;
  }
}

std::string ComponentSet::flow_infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                                        const std::string& model_hash) const {
  std::ostringstream o;
  o << r.prompt << "\n";
  if (!r.negative.empty() && r.cfg > 1.0f) o << "Negative prompt: " << r.negative << "\n";
  o << "Steps: " << r.steps << ", Sampler: " << sampler_display_name(r.sampler) << ", Schedule type: Simple, CFG scale: " << r.cfg
    << options_infotext_fields(traits().options, r.options);
  o << seed_model_infotext_fields(seed, r.width, r.height, model_name, model_hash) << fp8_weight_infotext_field(r);
  o << image_infotext_fields(r, r.width, r.height) << lora_infotext_fields(r) << storage_infotext_fields(r);
  return o.str();
}

}  // namespace fp8s
