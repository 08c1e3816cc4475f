# The engine's LibTorch-free sources: file formats, text, names, LoRA key mapping, request checks.
# engine/CMakeLists.txt builds them as fp8s_core; tests/fuzz builds them with clang and libFuzzer.
set(FP8S_CORE_SOURCES
  core/logging.cpp
  core/types.cpp
  core/install_prefix.cpp
  core/files.cpp
  text/t5_tokenizer.cpp
  core/sha256.cpp
  io/safetensors.cpp
  io/png.cpp
  io/image_metrics.cpp
  io/image_ops.cpp
  text/text_clean.cpp
  text/clip_tokenizer.cpp
  text/prompt_parser.cpp
  models/architecture.cpp
  models/checkpoint_layout.cpp
  models/ldm_config.cpp
  models/presets.cpp
  models/tensor_roles.cpp
  models/fp8_files.cpp
  lora/lora_keys.cpp
  lora/lora_library.cpp
  pipeline/infotext.cpp
  pipeline/request.cpp
  memory/process_memory.cpp
)
