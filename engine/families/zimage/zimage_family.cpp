#include "families/zimage/zimage_family.h"

#include "core/error.h"
#include "families/zimage/qwen3.h"
#include "families/zimage/zimage_sampling.h"
#include "families/zimage/zimage_transformer.h"
#include "pipeline/engine.h"
#include "pipeline/run_support.h"

namespace fp8s {
namespace {

// The transformer's prefix in a file (none, as ComfyUI's diffusion_models file, or an all-in-one
// file's `model.diffusion_model.`), when the file holds Z-Image's layout: the Lumina-2 caption
// embedder and refiners, with Z-Image's bare adaLN Linear.
std::optional<std::string> zimage_prefix(const SafetensorsFile& file) {
  for (const std::string p : {"", "model.diffusion_model."}) {
    if (file.find(p + "cap_embedder.1.weight") && file.find(p + "noise_refiner.0.attention.k_norm.weight") &&
        file.find(p + "layers.0.adaLN_modulation.0.weight")) {
      return p;
    }
  }
  return std::nullopt;
}

// A Qwen3 text encoder's prefix: Hugging Face's `model.`, or inside a ComfyUI all-in-one file.
std::string qwen3_prefix(const SafetensorsFile& file) {
  for (const std::string p : {"model.", "text_encoders.qwen3_4b.transformer.model."}) {
    if (file.find(p + "layers.0.self_attn.q_norm.weight")) return p;
  }
  throw InputError(file.path() + ": not a Qwen3 text encoder (no model.layers.0.self_attn.q_norm.weight)");
}

std::map<std::string, at::Tensor> run_zimage_probe(const std::string& role, const ProbeSetup& s, const ProbeInputs& read) {
  const SafetensorsFile file(s.model);
  if (role == "zimage" || role == "zimage-sample") {
    const auto prefix = zimage_prefix(file);
    if (!prefix) throw InputError(s.model + ": not a Z-Image transformer (no cap_embedder.1.weight with noise_refiner.* and layers.*)");
    const BuildOn on(s.device);
    ZImageTransformer m(zimage_config(file, *prefix));
    load_module_weights(*m, file, *prefix, s.storage, true, ZImageTransformerImpl::ignorable_keys(), {}, s.device, true);
    if (role == "zimage-sample") {
      std::map<std::string, int64_t> dims{{"noise", 4}, {"cap", 3}};
      if (s.cfg > 1) dims["neg"] = 3;
      if (s.strength < 1) dims["init"] = 4;
      auto in = read(dims);
      const ZImageSampling z{s.steps, s.shift, s.cfg, s.cfg_norm, s.cfg_truncation, s.strength};
      return {{"latent", zimage_sample(*m, in["noise"], in["cap"], in.count("neg") ? in["neg"] : at::Tensor(),
                                       in.count("init") ? in["init"] : at::Tensor(), z, compute_dtype(s.compute, s.device))}};
    }
    auto in = read({{"x", 4}, {"t", 1}, {"cap", 3}, {"cap_len", 1}});
    const auto len = in["cap_len"].to(at::kLong).reshape({-1}).contiguous();
    const std::vector<int64_t> cap_len(len.data_ptr<int64_t>(), len.data_ptr<int64_t>() + len.numel());
    return {{"pred", m->forward(in["x"], in["t"], in["cap"], cap_len, compute_dtype(s.compute, s.device))}};
  }
  const std::string prefix = qwen3_prefix(file);
  const BuildOn on(s.device);
  Qwen3Encoder encoder(qwen3_config(file, prefix));
  load_module_weights(*encoder, file, prefix, s.storage, is_fp8(s.storage.weights), encoder->ignorable_keys(), {}, s.device, true);
  auto in = read({{"tokens", 2}, {"mask", 2}});
  return {{"hidden", encoder->forward(in["tokens"].to(at::kLong), in["mask"], compute_dtype(s.compute, s.device))}};
}

FamilyTraits zimage_traits() {
  FamilyTraits t;
  t.id = "zimage-turbo";
  t.name = "Z-Image Turbo";
  t.native_size = 1024;
  t.size_multiple = 16;
  t.samplers = {Sampler::Euler};
  t.default_steps = 8;
  t.default_cfg = 1.0f;
  t.clip_skip = false;
  t.latent.channels = 16;
  t.latent.scale = 0.3611f;
  t.latent.shift = 0.1159f;
  t.denoiser_label = "Transformer";
  t.encode_label = "Qwen3 encode";
  t.sample_label = "transformer steps";
  return t;
}

}  // namespace

FamilyEntry zimage_family_entry() {
  FamilyEntry e;
  e.id = "zimage";
  e.detect = [](const SafetensorsFile& file) { return zimage_prefix(file).has_value(); };
  e.traits = [](const SafetensorsFile&) { return zimage_traits(); };
  e.open = [](const LoadOptions& o, const at::Device&) -> std::unique_ptr<FamilyModel> {
    throw InputError(o.checkpoint + ": a Z-Image Turbo transformer; this version runs its tokenizer, text encoder and "
                     "transformer (tokenize --qwen, probe qwen3 / zimage) but cannot generate with it yet");
    return nullptr;
  };
  e.tools.probe = {{"qwen3", "zimage", "zimage-sample"}, run_zimage_probe};
  return e;
}

}  // namespace fp8s
