// What a model family is to the front ends: its sizes, samplers, guidance, components and latent
// format (docs/architecture.md, "Families"). LibTorch-free: it rides in ModelInfo to the GUI, which
// builds its controls from it and never asks which family is loaded.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/types.h"

namespace fp8s {

// The latent space a family samples in: its channels, the autoencoder's downsampling factor, the
// scale and shift that map the autoencoder's latent into it, and the latent -> RGB preview
// (ComfyUI's latent_rgb_factors: rgb = latent · factors + bias, then (rgb + 1) / 2).
struct LatentFormat {
  int channels = 4;
  int factor = 8;
  float scale = 1.0f, shift = 0.0f;
  std::vector<float> rgb_factors;  // channels × 3, row-major; empty: no preview
  std::vector<float> rgb_bias;     // 3 values, or empty
};

// One part of a model besides its main file: the role it is named by (`--component ROLE=FILE`),
// what the GUI calls it, and the file names a models folder is searched for.
struct ComponentRole {
  std::string role;   // "t5xxl", "clip_l", "vae"
  std::string label;  // "T5-XXL"
  std::vector<std::string> file_hints;  // e.g. "t5xxl", "clip_l" (file names starting with them)
  std::string flag;   // the CLI's shorthand --FLAG for --component ROLE=FILE ("t5"; empty: none)
  std::string help;   // what to give it ("t5xxl_fp16 / _fp8_e4m3fn[_scaled].safetensors")
  bool tokenizer = false;  // a tokenizer (tokenizer.json or its folder), not a weights file
};

// A setting a family declares (issue 56): the CLI's --NAME, the request's and the settings file's
// key, its infotext field, and the Prompt panel's control are all made from it, and nothing
// outside the family names it. Values travel as text (GenerationRequest::options); absent is the
// default.
struct FamilyOption {
  // Files: paths joined by ';', at most `max` of them (0: any number); a repeated CLI flag, an
  // image strip in the Prompt panel.
  enum class Type { Number, Integer, Flag, Choice, Text, Files };
  std::string name;   // "guidance": --guidance, options["guidance"]
  std::string label;  // the Prompt panel's ("Guidance")
  std::string infotext_key;  // "Distilled CFG Scale" (empty: not written)
  Type type = Type::Number;
  double min = 0, max = 0;  // Number and Integer; a Files option's most files in `max`
  std::string default_value;  // "3.5"; a Flag's is "0"
  // Choice: its values. Flag: the infotext's words for off and on ({"on", "off"}; empty: False, True).
  std::vector<std::string> choices;
  std::string help;  // --help and the control's tooltip
  bool prompt_panel = false;  // the Prompt panel shows a control for it
  bool at_load = false;  // a load's setting (LoadOptions::options), not a request's
  bool always_written = false;  // the infotext writes it at its default too
  // Text and Files: "" when the value is good, else why not (without the option's name).
  std::function<std::string(const std::string& value)> check;
};

// A schedule the family offers, with the name its UI shows ("Karras", "Simple").
struct ScheduleChoice {
  Schedule schedule = Schedule::Normal;
  std::string label;
};

// A model's weight bytes by part: the denoiser (UNet or transformer), the text encoders, the
// autoencoder.
struct WeightBytes {
  uint64_t denoiser = 0, text = 0, vae = 0;
  uint64_t control = 0;  // the loaded ControlNets
  uint64_t total() const { return denoiser + text + vae + control; }
};

// How a family's network output becomes the denoised latent k-diffusion's samplers step with:
// Eps, D(x, σ) = x − σ·ε (σ: the discrete VP model's noise level); Flow, D(x, σ) = x − σ·v with
// σ = t on the straight line x_t = t·noise + (1 − t)·x0 (ComfyUI's CONST model sampling).
enum class Prediction { Eps, Flow };

struct FamilyTraits {
  std::string id;    // "sd1", "sdxl", "flux-dev", "flux-schnell"
  std::string name;  // "Stable Diffusion 1.x", "Flux.1 dev"
  Prediction prediction = Prediction::Eps;
  int native_size = 512;
  int size_multiple = 8;  // width and height are multiples of it
  int min_size = 64;
  int size_step = 64;     // the size controls' step
  std::vector<std::pair<int, int>> size_presets;
  std::vector<Sampler> samplers;  // the first is the default
  std::vector<ScheduleChoice> schedules;  // the first is the default
  int default_steps = 20;
  float default_cfg = 7.0f;  // 1: no CFG pass (the negative prompt is unused)
  bool cfg_control = true;  // the Prompt panel shows CFG (not where a distilled guidance takes its place)
  bool clip_skip = true;   // CLIP skip applies to its text encoders
  bool controlnet = false;  // it takes ControlNet units (GenerationRequest::controlnets)
  std::vector<ComponentRole> components;  // beyond the model file, tokenizers included
  std::vector<FamilyOption> options;  // the settings this model takes
  LatentFormat latent;
  // What its networks are called where the UI names them: the denoiser ("UNet", "Transformer"),
  // and the encode / sample / decode phases ("text encode", "T5 + CLIP-L encode", ...).
  std::string compare_modes = "fp16,fp8-e4m3";  // what compare runs when no --modes is given
  bool fp32_probe = true;  // compare measures the denoiser's output error against FP32 storage (it fits)
  std::string denoiser_label = "UNet";
  std::string encode_label = "text encode", sample_label = "UNet steps", decode_label = "VAE decode";

  bool offers(Sampler s) const;
  bool offers(Schedule s) const;
};

// The traits of a model file's family from its header, by the family registry
// (pipeline/family.h); FamilyTraits' defaults when the file cannot be read (the load that follows
// names the problem).
FamilyTraits family_traits_of(const std::string& checkpoint);

}  // namespace fp8s
