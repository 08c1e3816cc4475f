// The subcommands of fp8studio-cli; each registers itself on the app with its options.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "pipeline/engine.h"

namespace fp8s::cli {

// --lora FILE[:MULT] flags -> LoRA requests (multiplier 1 when absent; finite, |MULT| <= 100).
// Throws InputError for a bad flag.
std::vector<LoraRequest> parse_lora_flags(const std::vector<std::string>& flags);

// "WxH" (sep 'x') or "TOP,LEFT" (sep ','): two non-negative ints into a and b. Returns "" on
// success, else the message (a and b untouched).
std::string parse_size_pair(const std::string& v, char sep, int& a, int& b);

// Options every subcommand has.
struct CommonOptions {
  std::string log_level = "info";
  bool json = false;
  int threads = 0;  // --threads: 0 = the usable cores (core/threads.h)
};
void add_common_options(CLI::App& sub, CommonOptions& common, bool reports);
// What a subcommand's --threads does once parsed (main.cpp: core/threads.h's init_threads; this
// file stays free of LibTorch for the fuzz targets). Empty: nothing.
std::function<void(int)>& threads_hook();

// ControlNet units: each flag may be repeated, the Nth value belonging to the Nth --controlnet; a
// flag given once applies to every unit.
struct ControlFlags {
  std::vector<std::string> models, images, preprocessors, resizes, modes;
  std::vector<float> strengths, starts, ends;
  std::vector<int> lows, highs;
  bool guess_mode = false;
  std::string save_hint;  // write the first unit's preprocessed hint here (PNG)
};

// The request flags shared by generate, compare and bench, and their conversion.
struct RequestFlags {
  std::string sampler = "dpmpp_2m", schedule = "karras", weights = "auto", scale = "none",
              compute = "auto", lora_mode = "auto";
  std::string init_image, mask;  // PNG paths, read by finish_request
  // the options whose defaults are the model family's when not given (FamilyTraits)
  CLI::Option *sampler_option = nullptr, *schedule_option = nullptr, *cfg_option = nullptr, *steps_option = nullptr;
  ControlFlags control;
};
void add_request_options(CLI::App& sub, GenerationRequest& r, RequestFlags& flags);
// --NAME for each option the registered families declare (a request's, or with `at_load` a
// load's), each checked against its declaration as it is parsed, into `values` by name.
void add_family_options(CLI::App& sub, std::map<std::string, std::string>& values, bool at_load);
void add_control_options(CLI::App& sub, ControlFlags& flags);
// The units the flags describe (their control images read); InputError for counts that do not match.
std::vector<ControlUnit> control_units(const ControlFlags& flags);
// The checkpoint a subcommand runs on: `--model` when given, else the shipped demo model
// (verified; InputError naming the places looked at when it is missing).
std::string model_or_demo(const std::string& model_flag);

// --model, --vocab, --device (and --lora-dir) of the subcommands that run an engine.
struct ModelFlags {
  std::string model, vocab, lora_dir, device = "auto";
  // a model's other files: --component ROLE=FILE, and each declared role's shorthand
  // (ComponentRole::flag: --t5, --vae, ...) by role
  std::vector<std::string> components;
  std::map<std::string, std::string> role_files;
  std::map<std::string, std::string> load_settings;  // the families' load settings (FamilyOption::at_load)
  std::string embeddings_dir;  // empty: the user data folder's embeddings/
};
void add_model_options(CLI::App& sub, ModelFlags& flags, bool lora_dir);
// Of those, --component ROLE=FILE and each declared role's shorthand only (inspect's).
void add_component_options(CLI::App& sub, ModelFlags& flags);
// The engine's LoadOptions for the flags (the demo model when --model is absent).
LoadOptions load_options(const ModelFlags& flags);
// --device auto|cpu|cuda[:N] (checked when the engine starts, before the model is read).
void add_device_option(CLI::App& sub, std::string& device);
// `auto_storage`: what `--weights auto` (the default) means for the chosen checkpoint, i.e.
// default_storage() of its inspect report; FP16 where no checkpoint is involved.
// `family`: the model's traits (family_traits_of): its first sampler and schedule and its CFG
// where those options were not given.
void finish_request(GenerationRequest& r, const RequestFlags& flags,
                    const StorageSpec& auto_storage = {WeightType::FP16, Fp8Scale::None, false},
                    const FamilyTraits* family = nullptr);
// What `--weights auto` means for a checkpoint: its family's choice (FamilyEntry::auto_storage).
StorageSpec auto_storage_for(const std::string& checkpoint);

void register_make_synthetic(CLI::App& app);
void register_make_synthetic_lora(CLI::App& app);
void register_inspect(CLI::App& app);
void register_convert(CLI::App& app);
void register_probe(CLI::App& app);
void register_bench(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_generate(CLI::App& app);
void register_compare(CLI::App& app);
void register_train_demo(CLI::App& app);
void register_demo_eval(CLI::App& app);
void register_soak(CLI::App& app);
void register_device_test(CLI::App& app);
// Adds bench's `generate` section options to `bench`; returns what runs the section.
std::function<void(bool json)> register_bench_generate(CLI::App& bench);

}  // namespace fp8s::cli
