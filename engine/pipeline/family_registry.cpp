// The registry of model families, the one detector the engine, inspect, the CLI, the GUI and LoRA
// ask; and the latent preview every family's live steps use.
#include <ATen/ATen.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "pipeline/family.h"
#include "pipeline/family_options.h"
#include "models/architecture.h"
#include "pipeline/engine.h"

namespace fp8s {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

// Asked newest first: the built-in checkpoint family (SD), which names what it cannot run, is
// registered first and so asked last.
std::vector<FamilyEntry>& registry() {
  static std::vector<FamilyEntry> entries = builtin_families();
  return entries;
}

std::vector<FolderRenamer> family_folder_names() {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<FolderRenamer> out;
  for (const auto& e : registry()) out.insert(out.end(), e.tools.folder_names.begin(), e.tools.folder_names.end());
  return out;
}

std::string family_labels() {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  std::string out;
  for (const auto& e : registry()) {
    if (!e.label.empty()) out += (out.empty() ? "" : "; ") + e.label;
  }
  return out;
}

// Every registered family's declarations of one kind (FamilyEntry::options, ::roles), each name once:
// the first registered wins.
template <typename T, typename Name>
std::vector<T> declared(std::vector<T> FamilyEntry::*list, Name name) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<T> out;
  for (const auto& e : registry()) {
    for (const auto& item : e.*list) {
      if (std::none_of(out.begin(), out.end(), [&](const T& seen) { return name(seen) == name(item); })) out.push_back(item);
    }
  }
  return out;
}

std::vector<FamilyOption> family_options() {
  return declared(&FamilyEntry::options, [](const FamilyOption& o) { return o.name; });
}

// A role several families declare (text_encoder, vae) keeps the first's flag and names every
// family's files in its help ("Z-Image: qwen_3_4b.safetensors; klein: ..."), so --help tells each.
std::vector<ComponentRole> family_roles() {
  auto out = declared(&FamilyEntry::roles, [](const ComponentRole& r) { return r.role; });
  const std::lock_guard<std::mutex> lock(registry_mutex());
  for (auto& role : out) {
    for (const auto& e : registry()) {
      for (const auto& r : e.roles) {
        if (r.role == role.role && !r.help.empty() && role.help.find(r.help) == std::string::npos) role.help += "; " + r.help;
      }
    }
  }
  return out;
}

// before main() (pointers only: the families are built at their first use)
[[maybe_unused]] const bool g_folder_names_source = (set_folder_renamer_source(&family_folder_names), true);
[[maybe_unused]] const bool g_labels_source = (set_supported_families_source(&family_labels), true);
[[maybe_unused]] const bool g_options_source = (set_declared_options_source(&family_options), true);
[[maybe_unused]] const bool g_roles_source = (set_declared_roles_source(&family_roles), true);

}  // namespace

void register_family(FamilyEntry entry) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  auto& r = registry();
  for (auto& e : r) {
    if (e.id == entry.id) {
      e = std::move(entry);
      return;
    }
  }
  r.push_back(std::move(entry));
}

const FamilyEntry* find_family(const SafetensorsFile& file) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  const auto& r = registry();
  for (auto it = r.rbegin(); it != r.rend(); ++it) {
    if (it->detect(file)) return &*it;
  }
  return nullptr;
}

const std::vector<FamilyEntry>& registered_families() { return registry(); }


InspectReport inspect_model_file(const SafetensorsFile& file) {
  const FamilyEntry* family = find_family(file);
  if (family && family->tools.inspect_parts) return inspect_checkpoint(file, family->tools.inspect_parts(file));
  // a component file (a T5-XXL, an autoencoder, a Qwen3): the first family that names parts in it
  if (!family) {
    const std::lock_guard<std::mutex> lock(registry_mutex());
    for (const auto& e : registry()) {
      if (!e.tools.inspect_parts) continue;
      auto parts = e.tools.inspect_parts(file);
      if (!parts.parts.empty()) return inspect_checkpoint(file, parts);
    }
  }
  return inspect_checkpoint(file);
}

WeightBytes estimate_weight_bytes(const LoadOptions& options, const StorageSpec& storage) {
  const SafetensorsFile file(options.checkpoint);
  const FamilyEntry* family = find_family(file);
  if (!family || !family->tools.estimate) throw InputError(options.checkpoint + ": no model family estimates this file");
  return family->tools.estimate(options, storage);
}

const FamilyEntry* find_probe_family(const std::string& role) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& e : registry()) {
    for (const auto& r : e.tools.probe.roles) {
      if (r == role) return &e;
    }
  }
  return nullptr;
}

const FamilyEntry* find_synthetic_family(const std::string& arch, bool lora) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& e : registry()) {
    for (const auto& a : lora ? e.tools.synthetic.lora_archs : e.tools.synthetic.archs) {
      if (a == arch) return &e;
    }
  }
  return nullptr;
}

FamilyTraits family_traits_of(const std::string& checkpoint) {
  try {
    const SafetensorsFile file(checkpoint);
    if (const auto* family = find_family(file)) return family->traits(file);
  } catch (const std::exception&) {
    // unreadable or not a model: the engine's load says why
  }
  return FamilyTraits{};
}

bool FamilyTraits::offers(Sampler s) const {
  for (auto x : samplers) {
    if (x == s) return true;
  }
  return false;
}

bool FamilyTraits::offers(Schedule s) const {
  for (const auto& x : schedules) {
    if (x.schedule == s) return true;
  }
  return false;
}

void FamilyModel::describe(ModelInfo& info) const {
  info.architecture = traits().name;
  info.storage = weight_type_name(storage().weights);
}

std::string FamilyModel::infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                                  const std::string& model_hash) const {
  return format_infotext(r, seed, model_name, model_hash, r.width, r.height) + options_infotext_fields(traits().options, r.options);
}

std::vector<float> FamilyModel::probe(const StorageSpec&, ComputeType, uint64_t, int, const std::vector<LoraRequest>&, LoraMode) {
  throw InputError(traits().name + " has no denoiser probe (compare's output error needs one)");
}

void describe_residency(const ResidencyPlan& plan, ModelInfo& info) {
  info.blocks = static_cast<int>(plan.streamed.size());
  info.streamed_blocks = plan.streamed_count();
  info.resident_block_bytes = plan.resident_bytes;
  info.streamed_block_bytes = plan.streamed_bytes;
  info.fixed_bytes = plan.fixed_bytes;
  info.residency = plan.any() ? plan.describe() : std::string();
  info.block_plan.clear();
  for (std::size_t i = 0; i < plan.blocks.size(); ++i) {
    info.block_plan.push_back({plan.blocks[i].name, plan.blocks[i].bytes, plan.blocks[i].compute_per_byte, plan.streamed[i]});
  }
}

RgbImage latent_preview(const at::Tensor& latent, const LatentFormat& format) {
  const int64_t channels = latent.size(1);
  if (format.rgb_factors.size() != static_cast<std::size_t>(channels) * 3) return {};
  auto coef = at::tensor(format.rgb_factors, at::kFloat).reshape({channels, 3});
  auto rgb = at::einsum("lxy,lr->xyr", {latent[0].to(at::kCPU, at::kFloat), coef});
  if (format.rgb_bias.size() == 3) rgb = rgb + at::tensor(format.rgb_bias, at::kFloat);
  rgb = ((rgb + 1) * 127.5).clamp(0, 255).round().to(at::kByte).contiguous();
  RgbImage img;
  img.height = static_cast<int>(rgb.size(0));
  img.width = static_cast<int>(rgb.size(1));
  img.pixels.assign(rgb.data_ptr<uint8_t>(), rgb.data_ptr<uint8_t>() + rgb.numel());
  return img;
}

}  // namespace fp8s
