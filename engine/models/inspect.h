// `inspect`: what a checkpoint holds, per component, and what it would take at each storage type.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"
#include "io/safetensors.h"
#include "models/architecture.h"
#include "models/fp8_files.h"

namespace fp8s {

struct ComponentStats {
  std::string name;  // unet, clip_l, open_clip_g, open_clip_h, vae, other
  uint64_t tensors = 0;
  uint64_t params = 0;           // weight elements (buffers excluded)
  uint64_t buffer_elements = 0;  // position ids, DDPM schedule, EMA scalars
  uint64_t stored_bytes = 0;     // as in the file
  uint64_t quantisable_tensors = 0;
  uint64_t quantisable_params = 0;
  uint64_t fp8_in_file = 0;      // quantisable weights stored F8_E4M3/F8_E5M2 in the file
  uint64_t bytes_fp32 = 0;       // storage type fp32
  uint64_t bytes_16bit = 0;      // fp16 or bf16
  uint64_t bytes_fp8 = 0;        // fp8 (scale none); the VAE stays 16-bit
  std::map<std::string, uint64_t> dtype_tensors;  // "F16" -> count
  // ComfyUI comfy_quant layers by format ("NVFP4" -> layers, and the bytes they are stored in)
  std::map<std::string, uint64_t> quant_layers, quant_bytes;
};

// A family's components in a file, for the report (FamilyTools::inspect_parts): each with the
// prefix its tensors have and whether its 2-D weights take FP8 (the autoencoder's do not);
// embeddings never do.
struct InspectPart {
  std::string label, prefix;
  bool quantisable = true;  // its 2-D weights go to FP8
  bool conv = false;        // its 4-D conv weights too (a ControlNet's QConv2d layers)
};
struct InspectParts {
  std::string family;  // its display name, when the file is one of its models
  std::vector<InspectPart> parts;
};

struct InspectReport {
  std::string path;
  uint64_t file_size = 0;
  Detection detection;
  std::string family;  // the family's name when a family described the file (InspectParts)
  // the architecture as the report names it: the family's name when SD's detector knows none
  std::string architecture() const {
    return detection.arch == Arch::UNKNOWN && !family.empty() ? family : detection.description();
  }
  std::string storage;  // "fp16", "fp32", "bf16", "fp8-e4m3 (scale tensor)", "mixed: ..."
  // The storage type the quantisable weights are in (unset when mixed or none); for FP8 the
  // scaling that its scale tensors show.
  std::optional<StorageSpec> own_storage;
  bool is_fp8_source() const { return own_storage && is_fp8(own_storage->weights); }
  // A comfy_quant file with INT8, MXFP8, NVFP4 or 4-bit layers (kept as stored under any storage).
  bool has_block_layers() const {
    for (const auto& [format, layers] : fp8.formats) {
      if (format.rfind("FP8", 0) != 0) return true;
    }
    return false;
  }
  std::string quantization_metadata;  // fp8s.quantization, if present
  Fp8FileScheme fp8;                  // whose FP8 layout the file follows (layout "" without FP8)
  // a comfy_quant file's layers by format, then its other quantisable weights by dtype:
  // "mixed: 3 layers NVFP4, 3 INT8 ConvRot, 4 FP8 E4M3, 38 BF16" ("" for other files)
  std::string formats_summary;
  std::string demo;                   // fp8s.demo: the built-in demo model's description
  std::vector<ComponentStats> components;
  ComponentStats total;
  uint64_t fp8_limit_bytes() const { return total.bytes_fp8; }
};

// `parts`: the components by prefix, when a family names them (else SD's names).
InspectReport inspect_checkpoint(const SafetensorsFile& file, const InspectParts& parts = {});
// The same, its components as the file's family names them, or for a component file the first
// family that names parts in it (pipeline/family_registry.cpp).
InspectReport inspect_model_file(const SafetensorsFile& file);
// A component's weight bytes when loaded in `storage`: FP32 4 bytes, 16-bit 2; FP8 one byte for
// the quantisable weights and 16-bit for the rest, the VAE 16-bit unless `storage.fp8_vae`.
uint64_t predicted_bytes(const ComponentStats& component, const StorageSpec& storage);
std::string format_inspect_report(const InspectReport& report);
nlohmann::json inspect_report_json(const InspectReport& report);

// What `--weights auto` loads: the checkpoint's own storage type, FP32 checkpoints as FP16 (as
// A1111 loads them), FP16 when the file's weights are mixed.
StorageSpec default_storage(const InspectReport& report);

// The component label of a tensor name (unet, clip_l, open_clip_g, ..., vae, other).
std::string component_label(const std::string& name);

}  // namespace fp8s
