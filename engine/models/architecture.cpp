// Architecture detection from the keys, and the configuration of an opened checkpoint.
#include "models/architecture.h"

#include <atomic>

#include "core/error.h"
#include "core/strings.h"

namespace fp8s {
namespace {

std::atomic<std::string (*)()> g_supported_source{nullptr};

std::string supported_families() {
  const auto source = g_supported_source.load();
  return source ? source() : "SD 1.x, SDXL base";
}

}  // namespace

void set_supported_families_source(std::string (*source)()) { g_supported_source.store(source); }

std::string Detection::description() const {
  return variant.empty() ? arch_name(arch) : std::string(arch_name(arch)) + " (" + variant + ")";
}

Detection detect_architecture(const ShapeMap& shapes) {
  Detection d;
  auto shape_of = [&](const std::string& key) -> const std::vector<int64_t>* {
    auto it = shapes.find(key);
    return it == shapes.end() ? nullptr : &it->second;
  };
  const std::string u = kUNetPrefix;
  // Flux (reference/flux/README.md): BFL's transformer with no prefix or ComfyUI's all-in-one
  for (const std::string p : {"", "model.diffusion_model."}) {
    if (!shape_of(p + "double_blocks.0.img_attn.qkv.weight")) continue;
    // FLUX.2 has double blocks too, with one shared modulation (double_stream_modulation_img):
    // not Flux.1, and its own family names it
    if (shape_of(p + "double_stream_modulation_img.lin.weight")) return d;
    d.arch = shape_of(p + "guidance_in.in_layer.weight") ? Arch::FLUX_DEV : Arch::FLUX_SCHNELL;
    if (shape_of("text_encoders.t5xxl.transformer.encoder.block.0.layer.0.SelfAttention.q.weight")) d.variant = "all-in-one";
    return d;
  }
  if (shape_of("encoder.block.0.layer.0.SelfAttention.q.weight") && shape_of("shared.weight")) {
    d.arch = Arch::FLUX_PART;
    d.variant = "T5-XXL text encoder";
    return d;
  }
  for (const std::string p : {"", "text_model."}) {
    if (shape_of(p + "embeddings.token_embedding.weight") && shape_of(p + "encoder.layers.0.mlp.fc1.weight")) {
      d.arch = Arch::FLUX_PART;
      d.variant = "CLIP-L text encoder";
      return d;
    }
  }
  if (shape_of("decoder.conv_in.weight") && !shape_of("quant_conv.weight")) {
    d.arch = Arch::FLUX_PART;
    d.variant = "autoencoder";
    return d;
  }
  if (shape_of(u + "x_embedder.proj.weight")) {
    d.arch = Arch::SD3;
    return d;
  }
  const auto* conv_in = shape_of(u + "input_blocks.0.0.weight");
  if (!conv_in || conv_in->size() != 4) return d;
  const int64_t in_ch = (*conv_in)[1];
  auto in_variant = [&](Arch arch) {
    if (in_ch == 9) return std::string("inpainting");
    if (in_ch == 8 && arch == Arch::SD1) return std::string("instruct-pix2pix");
    if (in_ch != 4) return "in_channels " + std::to_string(in_ch);
    return std::string();
  };
  if (shape_of("conditioner.embedders.1.model.ln_final.weight")) {
    d.arch = Arch::SDXL_BASE;
    d.variant = in_variant(d.arch);
    if (!shape_of(u + "middle_block.1.transformer_blocks.0.attn1.to_q.weight")) d.variant = "SSD-1B";
    return d;
  }
  if (const auto* ln = shape_of("conditioner.embedders.0.model.ln_final.weight")) {
    if (!ln->empty() && (*ln)[0] == 1280) {
      d.arch = Arch::SDXL_REFINER;
    } else {
      d.arch = Arch::SD2;
      d.variant = "sgm layout";
    }
    return d;
  }
  if (const auto* p = shape_of("cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight")) {
    if (p->size() == 2 && (*p)[1] == 1024) {
      d.arch = Arch::SD2;
      d.variant = in_variant(d.arch);
      return d;
    }
  }
  for (const auto& [name, shape] : shapes) {
    if (starts_with(name, "cond_stage_model.transformer.")) {
      d.arch = Arch::SD1;
      d.variant = in_variant(d.arch);
      return d;
    }
  }
  return d;
}

Detection detect_architecture(const SafetensorsFile& file) {
  ShapeMap shapes;
  for (const auto& t : file.tensors()) shapes[t.name] = t.shape;
  return detect_architecture(shapes);
}

namespace {

// A configuration from the file's own metadata describes the file's tensors: every network tensor it
// implies that the file holds has the shape it implies. Checked before a module is built, so a
// damaged configuration is named as such instead of failing in a load or a forward.
void check_config_matches(const ModelConfig& m, const SafetensorsFile& file) {
  for (const auto& e : checkpoint_layout(m, Dtype::F32)) {
    if (e.component == Component::Other) continue;
    const TensorRecord* rec = file.find(e.name);
    if (rec && rec->shape != e.shape) {
      throw InputError(file.path() + ": its ldm.config does not describe its tensors: " + e.name + " is " + shape_text(rec->shape) +
                       " in the file, " + shape_text(e.shape) + " by the configuration (the metadata is damaged: use a "
                       "checkpoint from its source)");
    }
  }
}

}  // namespace

ModelConfig config_for(const SafetensorsFile& file) {
  auto it = file.metadata().find("ldm.config");
  if (it != file.metadata().end()) {
    ModelConfig m = parse_ldm_config(it->second, file.path());
    check_config_matches(m, file);
    return m;
  }
  const Detection d = detect_architecture(file);
  ModelConfig m;
  if (d.arch == Arch::SD1) {
    m = preset_sd15();
  } else if (d.arch == Arch::SDXL_BASE && (d.variant.empty() || d.variant == "inpainting")) {
    m = preset_sdxl_base();
  } else if (d.arch == Arch::UNKNOWN) {
    const std::string first = file.tensors().empty() ? std::string("none") : "'" + file.tensors().front().name + "'";
    throw InputError(file.path() + ": not a model of a family this program loads (" + supported_families() +
                     "); its first tensor is " + first + ". Is it a LoRA, an embedding or a part of a model?");
  } else {
    throw InputError(file.path() + ": " + d.description() +
                     " checkpoints are not supported yet (supported: " + supported_families() + ")");
  }
  m.unet.in_channels = static_cast<int>(file.at("model.diffusion_model.input_blocks.0.0.weight").shape[1]);
  if (m.unet.in_channels != 4 && m.unet.in_channels != 9) {
    throw InputError(file.path() + ": " + d.description() + " checkpoints (a UNet of " + std::to_string(m.unet.in_channels) +
                     " input channels) are not supported yet (supported: 4, and 9 for inpainting models)");
  }
  m.ema_scalars = file.find("model_ema.decay") != nullptr;
  return m;
}

}  // namespace fp8s
