#include "pipeline/infotext.h"

#include "pipeline/family_options.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace fp8s {
namespace {

// A1111's "Masked content" choices.
const char* masked_content_name(InpaintFill f) {
  switch (f) {
    case InpaintFill::Fill: return "fill";
    case InpaintFill::Original: return "original";
    case InpaintFill::LatentNoise: return "latent noise";
    case InpaintFill::LatentNothing: return "latent nothing";
  }
  return "original";
}

}  // namespace

std::string format_infotext(const GenerationRequest& r, uint64_t seed, const std::string& model_name,
                            const std::string& model_hash, int width, int height) {
  std::ostringstream o;
  o << r.prompt << "\n";
  if (!r.negative.empty()) o << "Negative prompt: " << r.negative << "\n";
  o << "Steps: " << r.steps << ", Sampler: " << sampler_display_name(r.sampler)
    << ", Schedule type: " << (r.schedule == Schedule::Karras ? "Karras" : "Automatic")
    << ", CFG scale: " << r.cfg << seed_model_infotext_fields(seed, width, height, model_name, model_hash);
  if (r.clip_skip != 1) o << ", Clip skip: " << r.clip_skip;
  o << image_infotext_fields(r, width, height) << fp8_weight_infotext_field(r);
  if (is_fp8(r.storage.weights) && r.storage.scale != Fp8Scale::None) {
    o << ", FP8 scale: " << fp8_scale_name(r.storage.scale);
  }
  o << lora_infotext_fields(r) << storage_infotext_fields(r);
  return o.str();
}

std::string seed_model_infotext_fields(uint64_t seed, int width, int height, const std::string& model_name,
                                       const std::string& model_hash) {
  std::ostringstream o;
  o << ", Seed: " << seed << ", Size: " << width << "x" << height;
  if (!model_hash.empty()) o << ", Model hash: " << model_hash;
  o << ", Model: " << model_name;
  return o.str();
}

std::string fp8_weight_infotext_field(const GenerationRequest& r) {
  return std::string(", FP8 weight: ") + (is_fp8(r.storage.weights) ? weight_type_name(r.storage.weights) : "Disable");
}

std::string storage_infotext_fields(const GenerationRequest& r) {
  return std::string(", Weights: ") + weight_type_name(r.storage.weights) + ", Compute: " + compute_type_name(r.compute);
}

std::string image_infotext_fields(const GenerationRequest& r, int width, int height) {
  std::ostringstream o;
  if (r.init_image) o << ", Denoising strength: " << r.denoising_strength;
  if (r.init_image && r.mask) {
    o << ", Mask blur: " << r.mask_blur;
    if (r.inpainting_fill != InpaintFill::Original) o << ", Masked content: " << masked_content_name(r.inpainting_fill);
    if (r.inpaint_full_res) o << ", Inpaint area: Only masked, Masked area padding: " << r.inpaint_full_res_padding;
    if (r.invert_mask) o << ", Mask mode: Inpaint not masked";
  }
  if (r.enable_hr) {
    o << ", Denoising strength: " << r.hr_denoising_strength;
    if (r.hr_width > 0 || r.hr_height > 0) {
      o << ", Hires resize: " << r.hr_target_width(width) << "x" << r.hr_target_height(height);
    } else {
      o << ", Hires upscale: " << r.hr_scale;
    }
    if (r.hr_steps > 0) o << ", Hires steps: " << r.hr_steps;
    o << ", Hires upscaler: " << hr_upscaler_display_name(r.hr_upscaler);
  }
  return o.str();
}

std::string lora_infotext_fields(const GenerationRequest& r) {
  if (r.loras.empty()) return "";
  std::ostringstream o;
  o << ", LoRA: \"";
  for (std::size_t i = 0; i < r.loras.size(); ++i) {
    auto name = r.loras[i].path.substr(r.loras[i].path.find_last_of('/') + 1);
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) name.resize(name.size() - 12);
    o << (i ? ", " : "") << name << ": " << r.loras[i].unet_multiplier;
  }
  o << "\", LoRA mode: " << lora_mode_name(r.lora_mode);
  return o.str();
}

std::string controlnet_infotext_fields(const GenerationRequest& r) {
  std::ostringstream o;
  for (std::size_t i = 0; i < r.controlnets.size(); ++i) {
    const auto& u = r.controlnets[i];
    auto name = u.model.substr(u.model.find_last_of('/') + 1);
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) name.resize(name.size() - 12);
    o << ", ControlNet " << i << ": \"Module: " << control_preprocessor_name(u.preprocessor) << ", Model: " << name
      << ", Weight: " << u.strength << ", Resize Mode: " << resize_mode_display_name(u.resize);
    if (u.preprocessor == ControlPreprocessor::Canny) o << ", Threshold A: " << u.canny_low << ", Threshold B: " << u.canny_high;
    o << ", Guidance Start: " << u.start << ", Guidance End: " << u.end << ", Control Mode: " << control_mode_display_name(u.mode);
    if (u.guess_mode) o << ", Guess Mode: True";
    o << "\"";
  }
  return o.str();
}

namespace {

// One "ControlNet N" field's quoted "Key: value, ..." list as a unit (the model by name: the front
// end finds the file).
ControlUnit parse_controlnet_field(std::string value) {
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
  ControlUnit u;
  std::size_t i = 0;
  while (i < value.size()) {
    const auto colon = value.find(": ", i);
    if (colon == std::string::npos) break;
    auto end = value.find(", ", colon + 2);
    if (end == std::string::npos) end = value.size();
    const std::string key = value.substr(i, colon - i), v = value.substr(colon + 2, end - colon - 2);
    auto number = [&](float fallback) {
      try {
        const float f = std::stof(v);
        return std::isfinite(f) ? f : fallback;
      } catch (...) {
        return fallback;
      }
    };
    if (key == "Module") {
      if (const auto p = parse_control_preprocessor(v)) u.preprocessor = *p;
    } else if (key == "Model") {
      u.model = v;
    } else if (key == "Weight") {
      u.strength = number(u.strength);
    } else if (key == "Resize Mode") {
      for (auto m : {ResizeMode::JustResize, ResizeMode::Crop, ResizeMode::Fill}) {
        if (v == resize_mode_display_name(m)) u.resize = m;
      }
    } else if (key == "Threshold A") {
      u.canny_low = static_cast<int>(number(static_cast<float>(u.canny_low)));
    } else if (key == "Threshold B") {
      u.canny_high = static_cast<int>(number(static_cast<float>(u.canny_high)));
    } else if (key == "Guidance Start") {
      u.start = number(u.start);
    } else if (key == "Guidance End") {
      u.end = number(u.end);
    } else if (key == "Control Mode") {
      if (const auto m = parse_control_mode(v)) u.mode = *m;
    } else if (key == "Guess Mode") {
      u.guess_mode = v == "True";
    }
    i = end + 2;
  }
  return u;
}

// A number field, or `fallback` when it is not a number or does not fit the field's type
// (infotext comes from files off the internet: "Steps: 1e300" must not overflow an int).
template <class T>
T number(const std::string& v, T fallback) {
  double d = 0;
  try {
    d = std::stod(v);
  } catch (...) {
    return fallback;
  }
  if (!std::isfinite(d)) return fallback;
  if constexpr (std::is_integral_v<T>) {
    if (d < static_cast<double>(std::numeric_limits<T>::min()) || d >= -static_cast<double>(std::numeric_limits<T>::min())) return fallback;
  }
  return static_cast<T>(d);
}

// "WxH" into `w` and `h` (0 where not a number); nothing without the x.
void read_size(const std::string& value, int& w, int& h) {
  const auto x = value.find('x');
  if (x == std::string::npos) return;
  w = number(value.substr(0, x), 0);
  h = number(value.substr(x + 1), 0);
}

// The parameters line's "Key: value, Key: value" fields (values may be quoted), in order.
std::vector<std::pair<std::string, std::string>> infotext_fields(const std::string& p) {
  std::vector<std::pair<std::string, std::string>> fields;
  std::size_t i = 0;
  while (i < p.size()) {
    const auto colon = p.find(": ", i);
    if (colon == std::string::npos) break;
    std::size_t v = colon + 2, end;
    if (v < p.size() && p[v] == '"') {
      end = p.find('"', v + 1);
      end = end == std::string::npos ? p.size() : end + 1;
    } else {
      end = p.find(", ", v);
      if (end == std::string::npos) end = p.size();
    }
    fields.emplace_back(p.substr(i, colon - i), p.substr(v, end - v));
    i = end;
    while (i < p.size() && (p[i] == ',' || p[i] == ' ')) ++i;
  }
  return fields;
}

// The sampling and storage fields; false for another key.
bool read_sampling_field(const std::string& key, const std::string& value, GenerationRequest& r) {
  if (key == "Steps") r.steps = number(value, r.steps);
  else if (key == "CFG scale") r.cfg = number(value, r.cfg);
  else if (key == "Seed") r.seed = number(value, int64_t{-1});
  else if (key == "Clip skip") r.clip_skip = number(value, r.clip_skip);
  else if (key == "Sampler") {
    if (auto s = parse_sampler(value)) r.sampler = *s;
    if (value == "DPM++ 2M Karras") r.sampler = Sampler::DpmPP2M, r.schedule = Schedule::Karras;
  } else if (key == "Schedule type") {
    if (auto s = parse_schedule(value)) r.schedule = *s;
  } else if (key == "Size") {
    read_size(value, r.width, r.height);
  } else if (key == "Weights") {
    if (auto w = parse_weight_type(value)) r.storage.weights = *w;
  } else if (key == "Compute") {
    if (auto c = parse_compute_type(value)) r.compute = *c;
  } else if (key == "FP8 scale") {
    if (auto s = parse_fp8_scale(value)) r.storage.scale = *s;
  } else {
    return false;
  }
  return true;
}

// The img2img, inpainting and hires fields; false for another key.
bool read_image_field(const std::string& key, const std::string& value, GenerationRequest& r) {
  if (key == "Denoising strength") {
    r.denoising_strength = number(value, r.denoising_strength);
  } else if (key == "Mask blur") {
    r.mask_blur = number(value, r.mask_blur);
  } else if (key == "Masked content") {
    for (auto f : {InpaintFill::Fill, InpaintFill::Original, InpaintFill::LatentNoise, InpaintFill::LatentNothing}) {
      if (value == masked_content_name(f)) r.inpainting_fill = f;
    }
  } else if (key == "Inpaint area") {
    r.inpaint_full_res = value == "Only masked";
  } else if (key == "Masked area padding") {
    r.inpaint_full_res_padding = number(value, r.inpaint_full_res_padding);
  } else if (key == "Mask mode") {
    r.invert_mask = value == "Inpaint not masked";
  } else if (key == "Hires upscale") {
    r.enable_hr = true;
    r.hr_scale = number(value, r.hr_scale);
  } else if (key == "Hires resize") {
    r.enable_hr = true;
    read_size(value, r.hr_width, r.hr_height);
  } else if (key == "Hires steps") {
    r.hr_steps = number(value, r.hr_steps);
  } else if (key == "Hires upscaler") {
    r.enable_hr = true;
    if (auto u = parse_hr_upscaler(value)) r.hr_upscaler = *u;
  } else {
    return false;
  }
  return true;
}

// The prompt (the lines before `params_line`) and the negative prompt (from its "Negative prompt: " line).
void read_prompts(const std::vector<std::string>& lines, int params_line, GenerationRequest& r) {
  bool in_negative = false;
  for (int i = 0; i < params_line; ++i) {
    const auto& l = lines[static_cast<std::size_t>(i)];
    if (l.rfind("Negative prompt: ", 0) == 0) {
      in_negative = true;
      r.negative = l.substr(17);
      continue;
    }
    std::string& target = in_negative ? r.negative : r.prompt;
    target += (target.empty() && !in_negative ? "" : "\n") + l;
  }
}

}  // namespace

GenerationRequest parse_infotext(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  int params_line = -1;
  for (int i = static_cast<int>(lines.size()) - 1; i >= 0 && params_line < 0; --i) {
    if (lines[static_cast<std::size_t>(i)].rfind("Steps: ", 0) == 0) params_line = i;
  }
  if (params_line < 0) throw InputError("no generation parameters found (expected a 'Steps: ...' line)");
  GenerationRequest r;
  read_prompts(lines, params_line, r);
  bool have_strength = false;
  const auto family_options = declared_options();
  for (const auto& [key, value] : infotext_fields(lines[static_cast<std::size_t>(params_line)])) {
    have_strength = have_strength || key == "Denoising strength";
    if (read_sampling_field(key, value, r) || read_image_field(key, value, r)) continue;
    if (key.rfind("ControlNet ", 0) == 0) {
      if (r.controlnets.size() < 3) r.controlnets.push_back(parse_controlnet_field(value));
    } else {
      // a family's own field (FamilyOption::infotext_key): each option whose declaration the value suits
      read_option_field(family_options, key, value, r.options);
    }
  }
  if (r.enable_hr && have_strength) r.hr_denoising_strength = r.denoising_strength;  // txt2img: the hires pass's
  return r;
}

PngRequest read_png_request(const std::string& path) {
  auto png = read_png(path);
  if (png.parameters.empty()) throw InputError(path + ": the image has no generation parameters");
  const bool has_storage = png.parameters.find(", Weights: ") != std::string::npos;
  return {std::move(png.image), parse_infotext(png.parameters), has_storage};
}

}  // namespace fp8s
