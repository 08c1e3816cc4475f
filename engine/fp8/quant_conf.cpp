// comfy_quant layer descriptions (quant_formats.h): names, the JSON, stored shapes. LibTorch-free
// (fp8s_core: models/fp8_files reads the descriptions).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fp8/quant_formats.h"

namespace fp8s {
namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

bool power_of_four(int g) {
  if (g < 4) return false;
  while (g % 4 == 0) g /= 4;
  return g == 1;
}

const std::pair<QuantFormat, const char*> kNames[] = {
    {QuantFormat::Float8E4M3, "float8_e4m3fn"}, {QuantFormat::Float8E5M2, "float8_e5m2"},
    {QuantFormat::Int8, "int8_tensorwise"},     {QuantFormat::Mxfp8, "mxfp8"},
    {QuantFormat::Nvfp4, "nvfp4"},              {QuantFormat::ConvRotW4A4, "convrot_w4a4"},
    {QuantFormat::AwqW4A16, "awq_w4a16"},       {QuantFormat::SvdquantW4A4, "svdquant_w4a4"}};

}  // namespace

const char* quant_format_name(QuantFormat f) {
  for (const auto& [format, name] : kNames) {
    if (format == f) return name;
  }
  return "?";
}

std::string quant_format_label(const QuantLayerConf& c) {
  switch (c.format) {
    case QuantFormat::Float8E4M3: return "FP8 E4M3";
    case QuantFormat::Float8E5M2: return "FP8 E5M2";
    case QuantFormat::Int8: return c.convrot ? "INT8 ConvRot" : "INT8";
    case QuantFormat::Mxfp8: return "MXFP8";
    case QuantFormat::Nvfp4: return "NVFP4";
    case QuantFormat::ConvRotW4A4: return "ConvRot W4A4";
    case QuantFormat::AwqW4A16: return "AWQ W4A16";
    case QuantFormat::SvdquantW4A4: return "SVDQuant W4A4";
  }
  return "?";
}

QuantLayerConf parse_comfy_quant(const std::string& text, const std::string& label, const std::string& layer) {
  const std::string where = label + ": layer '" + layer + "'";
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw InputError(where + " has a comfy_quant description that is not JSON; the file is damaged");
  std::string format;
  if (j.is_string()) format = j.get<std::string>();
  if (j.is_object() && j.contains("format") && j["format"].is_string()) format = j["format"].get<std::string>();
  if (format.empty()) throw InputError(where + " has a comfy_quant description without a format; the file is damaged");
  QuantLayerConf c;
  bool known = false;
  for (const auto& [f, name] : kNames) {
    if (format == name) c.format = f, known = true;
  }
  if (!known) {
    throw InputError(where + " is stored as '" + format + "', a comfy_quant format FP8 Studio cannot decode (it reads float8_e4m3fn, "
                     "float8_e5m2, int8_tensorwise, mxfp8, nvfp4, convrot_w4a4, awq_w4a16, svdquant_w4a4): use another file of this model");
  }
  // an option at the top level, else under "params"
  auto option = [&](const char* key) -> const nlohmann::json* {
    if (!j.is_object()) return nullptr;
    if (j.contains(key)) return &j[key];
    if (j.contains("params") && j["params"].is_object() && j["params"].contains(key)) return &j["params"][key];
    return nullptr;
  };
  auto integer = [&](const char* key, int fallback, int lo, int hi) {
    const auto* v = option(key);
    if (!v) return fallback;
    if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
      throw InputError(where + ": comfy_quant option '" + key + "' is " + v->dump() + ", not a whole number in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + "; the file is damaged");
    }
    return static_cast<int>(v->get<int64_t>());
  };
  if (const auto* v = option("convrot"); v && v->is_boolean()) c.convrot = v->get<bool>();
  if (const auto* v = option("full_precision_matrix_mult"); v && v->is_boolean()) c.full_precision = v->get<bool>();
  c.convrot_group = integer("convrot_groupsize", 256, 4, 1 << 16);
  c.group_size = integer("group_size", 64, 1, 1 << 16);
  if ((c.convrot || c.format == QuantFormat::ConvRotW4A4) && !power_of_four(c.convrot_group)) {
    throw InputError(where + ": ConvRot group size " + std::to_string(c.convrot_group) + " is not a power of 4; the file is damaged");
  }
  return c;
}

std::string comfy_quant_json(const QuantLayerConf& c) {
  std::string s = std::string("{\"format\": \"") + quant_format_name(c.format) + "\"";
  if (c.full_precision) s += ", \"full_precision_matrix_mult\": true";
  if (c.format == QuantFormat::Int8 && c.convrot) s += ", \"convrot\": true, \"convrot_groupsize\": " + std::to_string(c.convrot_group);
  if (c.format == QuantFormat::ConvRotW4A4) s += ", \"convrot_groupsize\": " + std::to_string(c.convrot_group);
  if (c.format == QuantFormat::AwqW4A16) s += ", \"group_size\": " + std::to_string(c.group_size);
  return s + "}";
}

StoredShape stored_shape(const QuantLayerConf& c, int64_t n, int64_t k) {
  switch (c.format) {
    case QuantFormat::Mxfp8: {
      const int64_t np = round_up(n, 32), kp = round_up(k, 32);
      return {np, kp, round_up(np, 128), round_up(kp / 32, 4)};
    }
    case QuantFormat::Nvfp4: {
      const int64_t np = round_up(n, 16), kp = round_up(k, 16);
      return {np, kp / 2, round_up(np, 128), round_up(kp / 16, 4)};
    }
    case QuantFormat::ConvRotW4A4:
    case QuantFormat::AwqW4A16:
    case QuantFormat::SvdquantW4A4:
      return {n, k / 2, 0, 0};
    default:
      return {n, k, 0, 0};
  }
}

}  // namespace fp8s
